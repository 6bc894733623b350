"""The metadata DB: one SQLAlchemy engine per URL, sessions, and schema migration on first use.

SQLite (the default) runs in WAL mode with ``BEGIN IMMEDIATE`` transactions so concurrent
processes queue for the write lock instead of failing; on PostgreSQL every transaction takes
one advisory lock at BEGIN for the same serial order.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from aifab.core.settings import get_settings

#: The Alembic revision this code expects; a test checks it equals the migrations' head.
SCHEMA_REVISION = "0018"
#: aifab's own Alembic version table (Optuna, sharing the DB, uses ``alembic_version``).
VERSION_TABLE = "aifab_schema_version"
#: PostgreSQL advisory lock every aifab transaction holds (any fixed 64-bit number).
TXN_LOCK_KEY = 0x616966616254584E

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


def _create_private(path: Path) -> None:
    """Create the SQLite file owner-only (its -wal and -shm files take its mode)."""
    if not path.parent.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            _create_private(Path(path))
        engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    engine = create_engine(url, pool_pre_ping=True)
    if engine.dialect.name == "postgresql":
        event.listen(engine, "begin", _serialize_begin)
    return engine


def _serialize_begin(conn: Any) -> None:
    # aifab's invariants (one attempt per job, the audit chain, dataset versions) rest on
    # writers taking turns, as SQLite's BEGIN IMMEDIATE makes them. On PostgreSQL every
    # transaction takes one advisory lock, held to its commit or rollback, for the same order.
    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({TXN_LOCK_KEY})")


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
