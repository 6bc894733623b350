"""The metadata DB: one SQLAlchemy engine per URL, sessions, and schema migration on first use.

SQLite (the default) runs in WAL mode with ``BEGIN IMMEDIATE`` transactions so concurrent
processes queue for the write lock instead of failing; any other URL (``postgresql://``) is
used unchanged.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from aifab.core.settings import get_settings

#: The Alembic revision this code expects; a test checks it equals the migrations' head.
SCHEMA_REVISION = "0009"
#: aifab's own Alembic version table (Optuna, sharing the DB, uses ``alembic_version``).
VERSION_TABLE = "aifab_schema_version"

_engines: dict[str, Engine] = {}
_ready: set[str] = set()
_lock = threading.Lock()


class Base(DeclarativeBase):
    """Declarative base for every aifab table (each package defines its own tables)."""


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # Let SQLAlchemy's "begin" hook issue BEGIN IMMEDIATE instead of pysqlite's lazy BEGIN.
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=60000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def _sqlite_begin(conn: Any) -> None:
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    return create_engine(url, pool_pre_ping=True)


def get_engine(url: str | None = None) -> Engine:
    """Return the engine for ``url`` (default: the configured metadata DB), migrated to head."""
    url = url or get_settings().resolved_db_url
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            engine = _engines[url] = _make_engine(url)
        if url not in _ready:
            _ensure_schema(engine)
            _ready.add(url)
    return engine


def _current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        if not inspect(conn).has_table(VERSION_TABLE):
            return None
        row = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).first()
        return row[0] if row else None


def _ensure_schema(engine: Engine) -> None:
    if _current_revision(engine) == SCHEMA_REVISION:
        return
    from aifab.core.migrate import upgrade

    upgrade(engine)


def reset_engines() -> None:
    """Dispose every cached engine (tests switch workspaces between cases)."""
    with _lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()
        _ready.clear()


@contextlib.contextmanager
def session_scope(url: str | None = None) -> Iterator[Session]:
    """A transaction: commit on success, roll back on error."""
    factory = sessionmaker(bind=get_engine(url), expire_on_commit=False)
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
