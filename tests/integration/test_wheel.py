"""The wheel stands alone: built with ``python -m build``, installed outside the checkout, it runs.

Offline, the wheel goes in with ``pip install --no-deps --target DIR`` and runs on this venv's
third-party packages (a fresh venv could not download them here).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    cmd = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [whl] = out.glob("aifab-*.whl")
    return whl


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
    assert 'Requires-Dist: ray>=2.9; extra == "ray"' in meta
    assert "Requires-Dist: ray" not in meta.split("Provides-Extra")[0]  # not a core dependency


def test_installed_wheel_runs_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target"]
    done = subprocess.run([*pip, str(target), str(wheel)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": str(target), "AIFAB_HOME": str(tmp_path / "ws")}
    run = tmp_path / "elsewhere"
    run.mkdir()
    where = subprocess.run(
        [sys.executable, "-c", "import aifab; print(aifab.__file__)"],
        cwd=run,
        env=env,
        capture_output=True,
        text=True,
    )
    assert where.stdout.startswith(str(target)), where.stdout + where.stderr
    for args in (["--help"], ["init", "--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "aifab", *args],
            cwd=run,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "ws" / "aifab.db").is_file()  # the shipped migrations ran
