"""Shared fixtures: every test gets its own workspace; ``cli`` runs the real ``aifab`` command;
``live_server`` starts real uvicorn servers running ``create_app()`` on 127.0.0.1 threads."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from aifab.core.db import reset_engines


def isolate_env(mp: pytest.MonkeyPatch, home: Path) -> None:
    """Point aifab at ``home`` alone: no DB, tracking server or model hub from the caller's env."""
    mp.setenv("AIFAB_HOME", str(home))
    mp.setenv("AIFAB_ACTOR", "user:test")
    mp.setenv("HF_HUB_OFFLINE", "1")
    for name in (
        "AIFAB_DB_URL",
        "AIFAB_TRACKING_URI",
        "AIFAB_CHECKPOINT_DIR",
        "AIFAB_DEBUG",
        "AIFAB_STORAGE_URI",
    ):
        mp.delenv(name, raising=False)
    mp.delenv("AIFAB_AUDIT_KEY", raising=False)
    if os.environ.get(PG_SERVER_ENV):  # team mode: tests/team runs suites on PostgreSQL
        mp.setenv("AIFAB_DB_URL", new_pg_database(os.environ[PG_SERVER_ENV]))
        # A team's processes share one audit key from a secret (none is made per directory).
        mp.setenv("AIFAB_AUDIT_KEY", f"team-secret-{home.name}")


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


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """moto's standalone S3 server, the named stand-in for S3/MinIO (started once per session)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from moto_s3 import MotoS3Server

    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    server = MotoS3Server()
    yield server
    server.stop()


@pytest.fixture
def s3_storage(s3_server: Any, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Put this test's workspace bytes on a fresh bucket of the S3 stand-in; returns the URI."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    uri = f"s3://{s3_server.new_bucket()}/ws"
    monkeypatch.setenv("AIFAB_STORAGE_URI", uri)
    return uri


@pytest.fixture
def other_node(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], Path]:
    """Call to move this test onto another machine: an empty AIFAB_HOME (returned), the same
    metadata DB and the same store."""

    def switch() -> Path:
        home = tmp_path / "node2"
        monkeypatch.setenv("AIFAB_DB_URL", f"sqlite:///{workspace / 'aifab.db'}")
        monkeypatch.setenv("AIFAB_HOME", str(home))
        reset_engines()
        return home

    return switch


#: Live-server tests run on loaded 2-core machines (CI included), where httpx's 5 s default
#: timeout fails requests that are merely slow. Calls that pass a timeout keep theirs.
PATIENT_TIMEOUT_S = 60.0


@pytest.fixture(autouse=True, scope="session")
def _patient_http() -> Iterator[None]:
    """httpx's module-level helpers (``httpx.get``, ``httpx.post``...) default to a long timeout."""
    import functools

    names = ("request", "get", "post", "put", "patch", "delete", "head", "options", "stream")
    originals = {name: getattr(httpx, name) for name in names}

    def patient(call: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(call)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", PATIENT_TIMEOUT_S)
            return call(*args, **kwargs)

        return wrapper

    for name, call in originals.items():
        setattr(httpx, name, patient(call))
    yield
    for name, call in originals.items():
        setattr(httpx, name, call)


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """A real uvicorn server running ``create_app(**app_kwargs)`` on a background thread.

    It is returned once ``/readyz`` answers 200 (every deployment loaded or failed).
    """

    def __init__(self, ready_timeout_s: float = 180.0, **app_kwargs: Any) -> None:
        import uvicorn

        from aifab.serve.app import create_app

        self.app = create_app(**app_kwargs)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # log_config=None: uvicorn leaves logging alone, so its records reach the root logger
        # (where the key-leak test captures them).
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="warning", log_config=None
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + ready_timeout_s
        while not self._ready():
            if time.monotonic() > deadline or not self.thread.is_alive():
                self.stop()
                raise AssertionError(f"server at {self.url} not ready in {ready_timeout_s} s")
            time.sleep(0.05)

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        """Shut the server down (again is harmless)."""
        self.server.should_exit = True
        self.thread.join(timeout=60)


@pytest.fixture(scope="module")
def live_server() -> Iterator[Callable[..., LiveServer]]:
    """Start a :class:`LiveServer` with ``create_app`` keywords; all stop with the module."""
    started: list[LiveServer] = []

    def start(**app_kwargs: Any) -> LiveServer:
        server = LiveServer(**app_kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
