"""Team-mode fixtures: a throwaway PostgreSQL server for the session, a fresh database per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# pg.py and the helpers it shares with other tiers (tests/serve_proc.py) import by name.
sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]

from pg import PostgresServer, find_bindir  # noqa: E402


@pytest.fixture(autouse=True)
def team_audit_key(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The team's audit key, in the environment of every team test and the processes it starts
    (on a shared DB aifab makes none: each process needs the team's own, from a secret)."""
    key = f"team-audit-key-{workspace.parent.name}"
    monkeypatch.setenv("AIFAB_AUDIT_KEY", key)
    return key


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """A PostgreSQL 15 server from the machine's packages (skipped, with why, if there is none)."""
    bindir, why = find_bindir()
    if bindir is None:
        pytest.skip(why)
    server = PostgresServer(bindir)
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(
    request: pytest.FixtureRequest, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The metadata DB of the test's workspace: SQLite (default) or a fresh PostgreSQL database."""
    from aifab.core.db import reset_engines

    if request.param == "sqlite":
        workspace.mkdir(parents=True, exist_ok=True)
        yield f"sqlite:///{workspace / 'aifab.db'}"
        return
    server = request.getfixturevalue("pg_server")
    url = server.new_database()
    monkeypatch.setenv("AIFAB_DB_URL", url)
    reset_engines()
    yield url
    reset_engines()


@pytest.fixture
def shared_pg(pg_server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh PostgreSQL database for this test and the node processes it starts, migrated once
    before they start (so they do not all migrate at once)."""
    from aifab.core.db import get_engine, reset_engines

    url = pg_server.new_database()
    monkeypatch.setenv("AIFAB_DB_URL", url)
    reset_engines()
    get_engine()
    yield url
    reset_engines()
