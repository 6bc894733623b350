"""Read-only access to the default SQLite metadata DB with the stdlib ``sqlite3`` module.

The CLI's listing commands use it to answer in a fraction of the time SQLAlchemy, pydantic
settings and the table modules take to import. It applies only where the ORM path would read
the same file without changing it: no ``AIFAB_DB_URL``, the workspace's ``aifab.db`` exists and
is at :data:`~aifab.core.schema_version.SCHEMA_REVISION`. Otherwise :func:`open_metadata_db`
returns None and the caller takes the ORM path (which creates or migrates the DB).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from aifab.core.schema_version import SCHEMA_REVISION, VERSION_TABLE

#: The settings that decide where the metadata DB is (see :class:`aifab.core.settings.Settings`).
_HOME, _DB_URL = "AIFAB_HOME", "AIFAB_DB_URL"


def _setting(name: str) -> str | None:
    """``name`` from the environment, or ``...`` where pydantic-settings might read it otherwise.

    Settings match variable names case-insensitively; a lower- or mixed-case spelling is left
    to them (the caller then takes the ORM path).
    """
    spellings = [k for k in os.environ if k.upper() == name]
    if spellings and spellings != [name]:
        raise LookupError(name)
    return os.environ.get(name)


def metadata_db_path() -> Path | None:
    """The SQLite file the settings name, or None when they name another DB or are unusual."""
    try:
        if _setting(_DB_URL):
            return None
        home = _setting(_HOME) or ".aifab"
    except LookupError:
        return None
    return Path(home).expanduser().resolve() / "aifab.db"


@contextlib.contextmanager
def open_metadata_db() -> Iterator[sqlite3.Connection | None]:
    """A connection to the metadata DB for reading, or None where the ORM path must answer.

    Only SELECTs run on it, outside any explicit transaction, so it never takes the write lock
    and never waits for writers (WAL mode).
    """
    path = metadata_db_path()
    if path is None or not path.is_file():
        yield None
        return
    conn = sqlite3.connect(path, timeout=60)
    try:
        try:
            row = conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchone()
        except sqlite3.DatabaseError:
            row = None
        yield conn if row is not None and row[0] == SCHEMA_REVISION else None
    finally:
        conn.close()
