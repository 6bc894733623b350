"""Track tests share one workspace for the session: MLflow's schema takes seconds to make."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


def _set_env(mp: pytest.MonkeyPatch, home: Path) -> None:
    mp.setenv("AIFAB_HOME", str(home))
    mp.setenv("AIFAB_ACTOR", "user:test")
    for name in ("AIFAB_DB_URL", "AIFAB_TRACKING_URI", "AIFAB_DEBUG"):
        mp.delenv(name, raising=False)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The shared workspace, set in the environment for module-scoped fixtures too."""
    path = tmp_path_factory.getbasetemp() / "track-ws"
    with pytest.MonkeyPatch.context() as mp:
        _set_env(mp, path)
        yield path


@pytest.fixture(autouse=True)
def workspace(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Overrides the per-test workspace with the shared one."""
    _set_env(monkeypatch, home)
    return home
