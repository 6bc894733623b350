"""Run the Alembic migrations shipped in ``aifab/core/migrations`` against an engine."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


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
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def head_revision() -> str:
    """The newest revision among the shipped migrations."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head
