"""Run the Alembic migrations shipped in ``aifab/core/migrations`` against an engine."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, text

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
#: PostgreSQL advisory lock id held while migrating (any fixed 64-bit number).
_LOCK_KEY = 0x61696661625F6462


def _config():  # type: ignore[no-untyped-def]
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the DB behind ``engine`` to ``revision``."""
    from alembic import command

    cfg = _config()
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            # Processes starting together on a fresh DB would race on CREATE TABLE; the lock
            # queues them and the later ones find the schema at head. Released at commit.
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def head_revision() -> str:
    """The newest revision among the shipped migrations."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head
