"""Shared fixtures: every test gets its own workspace; ``cli`` runs the real ``aifab`` command."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aifab.core.db import reset_engines


def isolate_env(mp: pytest.MonkeyPatch, home: Path) -> None:
    """Point aifab at ``home`` alone: no DB, tracking server or model hub from the caller's env."""
    mp.setenv("AIFAB_HOME", str(home))
    mp.setenv("AIFAB_ACTOR", "user:test")
    mp.setenv("HF_HUB_OFFLINE", "1")
    for name in ("AIFAB_DB_URL", "AIFAB_TRACKING_URI", "AIFAB_CHECKPOINT_DIR", "AIFAB_DEBUG"):
        mp.delenv(name, raising=False)
    if os.environ.get(PG_SERVER_ENV):  # team mode: tests/team runs suites on PostgreSQL
        mp.setenv("AIFAB_DB_URL", new_pg_database(os.environ[PG_SERVER_ENV]))


#: Set (by tests/team) to a PostgreSQL server URL: every workspace gets a fresh database there.
PG_SERVER_ENV = "AIFAB_TEST_PG_SERVER"


def new_pg_database(server_url: str) -> str:
    """Create an empty database on the PostgreSQL server at ``server_url``; return its URL."""
    import uuid

    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(server_url)
    name = f"aifab_{uuid.uuid4().hex[:12]}"
    dsn = f"host={url.host} port={url.port} user={url.username} dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.set(database=name).render_as_string(hide_password=False)


@pytest.fixture(autouse=True)
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh AIFAB_HOME per test (and engines pointing at it)."""
    home = tmp_path / "ws"
    isolate_env(monkeypatch, home)
    reset_engines()
    yield home
    reset_engines()


@pytest.fixture(scope="module")
def module_workspace(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Path]:
    """One AIFAB_HOME for a whole test module (MLflow's schema and models take seconds to make).

    A module uses it by overriding ``workspace`` to return it.
    """
    home = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]) / "ws"
    with pytest.MonkeyPatch.context() as mp:
        isolate_env(mp, home)
        reset_engines()
        yield home
    reset_engines()


@dataclass
class CliResult:
    """What one ``aifab`` invocation did."""

    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    """Run ``aifab ARGS...`` in-process through the real entry point (error handling included)."""
    from aifab.cli.main import main

    def run(*args: object) -> CliResult:
        monkeypatch.setattr(sys, "argv", ["aifab", *(str(a) for a in args)])
        monkeypatch.setenv("COLUMNS", "200")
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out = capsys.readouterr()
        return CliResult(code, out.out, out.err)

    return run


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def churn_model(module_workspace: Path) -> dict[str, Any]:
    """The quickstart pipeline run once in the module's workspace: ``churn@champion``.

    A tabular MLP behind a fitted feature transform, registered with its training lineage.
    The module must use ``module_workspace`` as its ``workspace``.
    """
    from aifab.pipeline.runner import run_pipeline
    from aifab.track.registry import resolve_model

    result = run_pipeline(EXAMPLES / "quickstart" / "pipeline.yaml")
    failed = [(s.name, s.error) for s in result.steps if s.error]
    assert result.ok, f"the quickstart pipeline failed: {failed}"
    return resolve_model("churn@champion")


@pytest.fixture(scope="module")
def tiny_lm(module_workspace: Path) -> dict[str, Any]:
    """A tiny causal LM (with a chat-template tokenizer) pre-trained briefly: ``tiny-lm@1``.

    The module must use ``module_workspace`` as its ``workspace``.
    """
    from aifab.data import ingest
    from aifab.track.registry import resolve_model
    from aifab.train.recipes.lm import main

    ingest("lm_corpus", str(EXAMPLES / "llm" / "data" / "corpus.jsonl"))
    main(
        {
            "dataset": "lm_corpus",
            "text_column": "text",
            "model": {"preset": "tiny"},
            "vocab_size": 384,
            "block_size": 64,
            "batch_size": 16,
            "max_steps": 40,
            "eval_every": 40,
            "register": "tiny-lm",
            "system_metrics": False,
            "threads": 1,
            "progress": False,
        }
    )
    return resolve_model("tiny-lm@1")
