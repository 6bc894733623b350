"""The Ray runtime_env ships aifab to cluster nodes that do not have it at the same path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from aifab.jobs.executors.ray import runtime_env


def test_a_local_instance_needs_no_runtime_env() -> None:
    assert runtime_env(None) is None and runtime_env("local") is None


def test_joining_a_cluster_ships_the_aifab_package(tmp_path: Path) -> None:
    env = runtime_env("ray://head:10001")
    assert env is not None
    [package] = env["py_modules"]
    assert Path(package, "__init__.py").is_file() and Path(package).name == "aifab"
    # As Ray does on a node: the module unpacked somewhere else, put on PYTHONPATH alone.
    node = tmp_path / "node" / "py_modules"
    shutil.copytree(package, node / "aifab", ignore=shutil.ignore_patterns("__pycache__"))
    code = "import aifab.jobs.replica, aifab; print(aifab.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(node)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith(str(node))
