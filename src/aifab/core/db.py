"""The metadata DB: one SQLAlchemy engine per URL, sessions, and schema migration on first use.

There is no global lock. Reads never wait for writers: :func:`session_scope` with
``readonly=True`` begins a deferred transaction on SQLite (a WAL snapshot) and a ``READ ONLY``
one on PostgreSQL (MVCC). Writers on SQLite still begin with ``BEGIN IMMEDIATE`` (one writer at
a time per file, queued rather than failing); on PostgreSQL writers run concurrently and each
invariant is kept by a lock on what is contended: :func:`lock_aggregate` (an advisory lock
keyed by the aggregate, e.g. one dataset's version numbers or the audit chain), row locks,
unique constraints and atomic ``UPDATE ... SET n = n + x`` (docs/architecture.md lists which).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

# Re-exported: callers and migrations import them from here.
from aifab.core.schema_version import SCHEMA_REVISION as SCHEMA_REVISION
from aifab.core.schema_version import VERSION_TABLE as VERSION_TABLE
from aifab.core.settings import get_settings

#: Execution option marking a read-only session's connection (see :func:`session_scope`).
_READONLY = "aifab_readonly"

_engines: dict[str, Engine] = {}
_readers: dict[Engine, Engine] = {}  # the same engines (and pools), marked read-only
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
    # Writers take the write lock at BEGIN, so two never both read and then fail to upgrade;
    # readers begin deferred: a WAL snapshot that neither waits for nor blocks a writer.
    readonly = conn.get_execution_options().get(_READONLY, False)
    conn.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")


def _postgresql_begin(conn: Any) -> None:
    # A read-only session that writes by mistake fails loudly instead of racing writers.
    if conn.get_execution_options().get(_READONLY, False):
        conn.exec_driver_sql("SET TRANSACTION READ ONLY")


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
        event.listen(engine, "begin", _postgresql_begin)
    return engine


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
        _readers.clear()
        _ready.clear()


@contextlib.contextmanager
def session_scope(url: str | None = None, *, readonly: bool = False) -> Iterator[Session]:
    """A transaction: commit on success, roll back on error.

    Args:
        url: the DB (default: the configured metadata DB).
        readonly: a transaction that only reads: it never waits for writers nor they for it
            (deferred on SQLite, ``READ ONLY`` on PostgreSQL, where a write in it fails).
    """
    engine = get_engine(url)
    if readonly:
        reader = _readers.get(engine)
        if reader is None:
            reader = _readers[engine] = engine.execution_options(**{_READONLY: True})
        engine = reader
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def aggregate_key(kind: str, key: str) -> int:
    """The signed 64-bit advisory-lock number of one aggregate (stable across processes)."""
    raw = hashlib.blake2b(f"aifab:{kind}:{key}".encode(), digest_size=8).digest()
    return int.from_bytes(raw, "big", signed=True)


def lock_aggregate(session: Session, kind: str, key: str, *, shared: bool = False) -> None:
    """Hold one aggregate's lock until ``session`` commits or rolls back.

    Writers of the same aggregate (``("dataset", name)``, ``("audit", "chain")``...) take turns
    from here on; other writers and every reader go on. On PostgreSQL this is a transaction-level
    advisory lock; on SQLite a no-op, since ``BEGIN IMMEDIATE`` already lets one writer in at a
    time. Take aggregate locks before the audit chain's (audit events are appended last), so
    two transactions never wait for each other's.

    Args:
        session: the writing transaction.
        kind: what sort of aggregate (``dataset``, ``job-plan``, ``audit``...).
        key: which one.
        shared: a shared hold: many shared holders go together, an exclusive one waits for all.
    """
    if session.get_bind().dialect.name != "postgresql":
        return
    fn = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
    session.execute(text(f"SELECT {fn}(:key)"), {"key": aggregate_key(kind, key)})
