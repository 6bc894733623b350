"""The code version a run was made with: git commit, dirty flag and key package versions."""

from __future__ import annotations

import functools
import json
import os
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

#: Packages whose versions change training results; those installed are recorded on each run.
PACKAGES = (
    "aifab",
    "torch",
    "transformers",
    "peft",
    "tokenizers",
    "accelerate",
    "numpy",
    "scikit-learn",
    "pykeen",
    "optuna",
    "deepspeed",
    "mlflow",
)

_GIT_TIMEOUT_S = 5.0


def _git(args: list[str], cwd: Path) -> str | None:
    """Run a read-only git command; None when git is missing or ``cwd`` is not in a repo."""
    # GIT_OPTIONAL_LOCKS=0: `git status` must not take the index lock of a repo others use.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_info(path: Path) -> dict[str, Any] | None:
    """The commit and dirty flag (tracked files changed) of the repo holding ``path``.

    Returns:
        ``{"commit", "dirty", "root"}``, or None when ``path`` is not inside a git work tree.
    """
    # One process for both: it fails outside a work tree and in a repo with no commit yet.
    out = _git(["rev-parse", "--show-toplevel", "HEAD"], path)
    root, _, commit = (out or "").partition("\n")
    if not root or not commit:
        return None
    status = _git(["status", "--porcelain", "--untracked-files=no"], path)
    return {"commit": commit, "dirty": bool(status), "root": root}


@functools.cache
def package_versions() -> dict[str, str]:
    """Versions of the installed packages in :data:`PACKAGES` (cached: fixed per process)."""
    versions: dict[str, str] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def code_version(cwd: Path | None = None) -> dict[str, Any]:
    """Describe the code running now.

    The git repo is the working directory's (the user's project) when it is one, else the repo
    aifab itself is installed from (an editable checkout); neither gives ``git_commit`` None.

    Returns:
        ``{"git_commit", "git_dirty", "git_root", "aifab_version", "packages"}``.
    """
    info = git_info(cwd or Path.cwd()) or git_info(Path(__file__).resolve().parent)
    packages = package_versions()
    return {
        "git_commit": info["commit"] if info else None,
        "git_dirty": info["dirty"] if info else None,
        "git_root": info["root"] if info else None,
        "aifab_version": packages.get("aifab", "unknown"),
        "packages": packages,
    }


def code_version_tags(version: dict[str, Any]) -> dict[str, str]:
    """MLflow run tags for a :func:`code_version` result.

    The commit is also set as MLflow's own ``mlflow.source.git.commit`` so the MLflow UI shows it.
    """
    tags = {
        "aifab.version": str(version["aifab_version"]),
        "aifab.packages": json.dumps(version["packages"], sort_keys=True),
    }
    if version["git_commit"]:
        tags["aifab.git_commit"] = version["git_commit"]
        tags["aifab.git_dirty"] = "true" if version["git_dirty"] else "false"
        tags["aifab.git_root"] = version["git_root"]
        tags["mlflow.source.git.commit"] = version["git_commit"]
    return tags
