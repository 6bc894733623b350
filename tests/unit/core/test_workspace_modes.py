"""The workspace and its metadata DB are owner-only (issue 9, fault 9)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_workspace_and_db_are_owner_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from aifab.core import init_workspace
    from aifab.core.db import reset_engines
    from aifab.serve.keys import create_key

    old_umask = os.umask(0o022)  # a typical umask: files world-readable by default
    home = tmp_path / "ws"
    monkeypatch.setenv("AIFAB_HOME", str(home))
    reset_engines()
    try:
        init_workspace()
        create_key("client", name="app")  # writes through WAL
        assert _mode(home) == 0o700
        assert _mode(home / "lake") == 0o700
        for name in ("aifab.db", "aifab.db-wal", "aifab.db-shm"):
            path = home / name
            if path.exists():
                assert _mode(path) == 0o600, name
        assert (home / "aifab.db").exists()
    finally:
        os.umask(old_umask)
        reset_engines()
