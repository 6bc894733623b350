"""Read-only access to the workspace's SQLite DBs with the stdlib ``sqlite3`` module.

The CLI's listing commands use it to answer in a fraction of the time SQLAlchemy, pydantic
settings, the table modules (and MLflow, for the tracking DB) take to import. It applies only
where the usual path would read the same file without changing it: no URL setting naming
another DB, the workspace's file exists and its schema is at the expected revision (for
``aifab.db``, :data:`~aifab.core.schema_version.SCHEMA_REVISION`). Otherwise the functions
return None and the caller takes the usual path (which creates or migrates the DB).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from aifab.core.schema_version import SCHEMA_REVISION, VERSION_TABLE

#: Settings that decide where the DBs are (see :class:`aifab.core.settings.Settings`).
_HOME, _DB_URL = "AIFAB_HOME", "AIFAB_DB_URL"
TRACKING_URI = "AIFAB_TRACKING_URI"


def _setting(name: str) -> str | None:
    """``name`` from the environment; LookupError where pydantic-settings might read another.

    Settings match variable names case-insensitively; a lower- or mixed-case spelling is left
    to them (the caller then takes the ORM path).
    """
    spellings = [k for k in os.environ if k.upper() == name]
    if spellings and spellings != [name]:
        raise LookupError(name)
    return os.environ.get(name)


def workspace_db_path(file_name: str, url_setting: str) -> Path | None:
    """The workspace's SQLite file ``file_name``, or None when ``url_setting`` names another DB.

    Also None when the settings are spelled unusually (see :func:`_setting`).
    """
    try:
        if _setting(url_setting):
            return None
        home = _setting(_HOME)
    except LookupError:
        return None
    # As Settings reads it: unset is the default, set but empty is the current directory.
    return Path(".aifab" if home is None else home).expanduser().resolve() / file_name


def metadata_db_path() -> Path | None:
    """The metadata DB's SQLite file, or None when the settings name another DB."""
    return workspace_db_path("aifab.db", _DB_URL)


@contextlib.contextmanager
def open_at_revision(
    path: Path | None, version_table: str, revision: str
) -> Iterator[sqlite3.Connection | None]:
    """A connection to the SQLite file ``path`` if its schema is at ``revision``, else None.

    Only SELECTs run on it, outside any explicit transaction, so it never takes the write lock
    and never waits for writers (WAL mode). A missing file is not created.
    """
    if path is None or not path.is_file():
        yield None
        return
    conn = sqlite3.connect(path, timeout=60)
    try:
        try:
            row = conn.execute(f"SELECT version_num FROM {version_table}").fetchone()
        except sqlite3.DatabaseError:
            row = None
        yield conn if row is not None and row[0] == revision else None
    finally:
        conn.close()


def open_metadata_db() -> contextlib.AbstractContextManager[sqlite3.Connection | None]:
    """A connection to the metadata DB for reading, or None where the ORM path must answer."""
    return open_at_revision(metadata_db_path(), VERSION_TABLE, SCHEMA_REVISION)
