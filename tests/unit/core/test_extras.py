"""Optional extras name themselves when missing; ``aifab --help`` imports no heavy package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aifab.core.extras import MissingExtraError, require

SRC = Path(__file__).resolve().parents[3] / "src"


def test_a_missing_extra_names_the_pip_install_that_adds_it() -> None:
    with pytest.raises(MissingExtraError) as err:
        require("kubernetes.no_such_module_here", "the Volcano executor")
    assert "pip install 'aifab[k8s]'" in err.value.message
    assert err.value.message.startswith("the Volcano executor needs kubernetes")
    assert require("json", "parsing").dumps([1]) == "[1]"


def test_ray_executor_without_ray_names_the_extra(tmp_path: Path) -> None:
    # A module named ``ray`` that fails to import stands in for an install without Ray.
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    code = (
        "from aifab.jobs.executors.ray import RayExecutor\n"
        "from aifab.core.extras import MissingExtraError\n"
        "try:\n    RayExecutor()._ray()\nexcept MissingExtraError as e:\n    print(e.message)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SRC)])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert "pip install 'aifab[ray]'" in out.stdout, out.stderr[-2000:]


def test_the_ray_extra_installs_the_ray_client() -> None:
    """docs/team.md: `RAY_ADDRESS=ray://head:10001` with `pip install 'aifab[ray]'` needs Ray's
    client (ray[client]: grpcio), which the extra did not install."""
    import tomllib

    pyproject = tomllib.loads((SRC.parent / "pyproject.toml").read_text())
    (ray_req,) = pyproject["project"]["optional-dependencies"]["ray"]
    assert ray_req.startswith("ray[client]")
    pytest.importorskip("ray")
    import importlib

    importlib.import_module("ray.util.client.worker")  # what ray.init("ray://...") imports


def test_a_ray_client_address_without_the_client_names_the_extra(tmp_path: Path) -> None:
    # A module named ``grpc`` that fails to import stands in for an install without grpcio.
    pytest.importorskip("ray")
    (tmp_path / "grpc").mkdir()
    (tmp_path / "grpc" / "__init__.py").write_text("raise ImportError('No module named grpc')\n")
    code = (
        "from aifab.jobs.executors.ray import RayExecutor\n"
        "from aifab.core.extras import MissingExtraError\n"
        "try:\n    RayExecutor('ray://127.0.0.1:1')._ray()\n"
        "except MissingExtraError as e:\n    print(e.message)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SRC)])}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert "pip install 'aifab[ray]'" in out.stdout, out.stderr[-2000:]


def test_help_imports_no_heavy_package(tmp_path: Path) -> None:
    code = (
        "import sys\nsys.argv = ['aifab', '--help']\n"
        "from aifab.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = ('torch', 'mlflow', 'ray', 'transformers', 'kubernetes', 'pykeen', 'fastapi')\n"
        "print('HEAVY', sorted(m for m in heavy if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC), "AIFAB_HOME": str(tmp_path / "ws")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Usage" in out.stdout and "HEAVY []" in out.stdout, out.stdout[-500:]
