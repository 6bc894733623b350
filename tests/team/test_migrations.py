"""The metadata DB schema on SQLite and PostgreSQL: upgrades from every revision; many starts."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from sqlalchemy import create_engine, inspect, text

from aifab.core.db import SCHEMA_REVISION, VERSION_TABLE, get_engine
from aifab.core.migrate import MIGRATIONS_DIR, head_revision, upgrade


def _revisions() -> list[str]:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return [s.revision for s in reversed(list(ScriptDirectory.from_config(cfg).walk_revisions()))]


@pytest.mark.parametrize("start", ["base", *_revisions()[:-1]])
def test_upgrade_from_every_earlier_revision(db_url: str, start: str) -> None:
    engine = create_engine(db_url)
    try:
        if start != "base":
            upgrade(engine, start)
        upgrade(engine)
        with engine.connect() as conn:
            assert conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar() == (
                head_revision()
            )
            tables = set(inspect(conn).get_table_names())
        fresh = create_engine("sqlite://")
        upgrade(fresh)
        assert set(inspect(fresh).get_table_names()) <= tables
    finally:
        engine.dispose()
    assert head_revision() == SCHEMA_REVISION


# Every process imports first, then all open the DB at the same instant (argv[1]).
_OPEN = """
import sys, time
import alembic.command, psycopg, sqlalchemy
from aifab.core.db import get_engine
time.sleep(max(0.0, float(sys.argv[1]) - time.time()))
get_engine()
"""


def test_processes_starting_on_a_fresh_db_at_once_all_start(db_url: str) -> None:
    """Regression: two processes migrating one fresh PostgreSQL DB raced on CREATE TABLE."""
    at = str(time.time() + 8)
    cmd = [sys.executable, "-c", _OPEN, at]
    procs = [subprocess.Popen(cmd, stderr=subprocess.PIPE) for _ in range(6)]
    errors = [p.communicate(timeout=120)[1].decode()[-500:] for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, errors
    with get_engine().connect() as conn:
        assert conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar() == (
            SCHEMA_REVISION
        )
