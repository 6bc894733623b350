"""The workspace directory layout (``AIFAB_HOME``) and its creation."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from aifab.core.settings import Settings, get_settings

_SUBDIRS = ("lake", "artifacts", "logs", "indexes", "exports", "tmp")


@dataclass(frozen=True)
class Workspace:
    """Paths inside one workspace root."""

    root: Path

    @property
    def lake(self) -> Path:
        """Immutable, content-addressed dataset objects."""
        return self.root / "lake"

    @property
    def artifacts(self) -> Path:
        """Fitted transforms, checkpoints and other run outputs."""
        return self.root / "artifacts"

    @property
    def logs(self) -> Path:
        """Job and server logs."""
        return self.root / "logs"

    @property
    def indexes(self) -> Path:
        """Vector and keyword indexes."""
        return self.root / "indexes"

    @property
    def exports(self) -> Path:
        """Exported models and datasets."""
        return self.root / "exports"

    @property
    def tmp(self) -> Path:
        """Scratch space on the same filesystem as the lake, so renames are atomic."""
        return self.root / "tmp"

    def sweep_tmp(self, older_than_s: float = 86400.0) -> int:
        """Delete scratch files older than ``older_than_s`` (left by killed processes).

        Returns:
            How many files were removed.
        """
        cutoff = time.time() - older_than_s
        removed = 0
        for path in self.tmp.glob("*"):
            try:
                if path.is_file() and path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed += 1
            except FileNotFoundError:
                continue  # another process finished with it first
        return removed

    def ensure(self) -> Workspace:
        """Create the workspace directories if missing (owner-only) and return self."""
        if not self.root.exists():
            # Key hashes and logged model inputs live here: only the owner may read them.
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.root, 0o700)  # mkdir's mode is filtered by the umask
        for name in _SUBDIRS:
            (self.root / name).mkdir(mode=0o700, parents=True, exist_ok=True)
        return self


def get_workspace(settings: Settings | None = None) -> Workspace:
    """Return the current workspace, creating its directories on first use."""
    settings = settings or get_settings()
    return Workspace(settings.resolved_home).ensure()
