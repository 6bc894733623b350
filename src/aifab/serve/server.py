"""``serve()``: run the app under uvicorn, with the jobs worker on a long-lived thread.

With ``workers > 1`` uvicorn runs that many server processes on one listening socket; they
share a per-run directory (``<workspace>/run/serve-<pid>``) holding the rate-limit buckets
(:class:`~aifab.serve.shared_limits.SharedRateLimiter`) and prometheus_client's multiprocess
files, so limits stay exact and ``/metrics`` adds up every process. Token quotas are exact
through the metadata DB already.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("aifab.serve")

__all__ = ["SHUTDOWN_GRACE_S", "serve", "worker_app"]

#: Seconds a stop waits for requests in flight and for the jobs worker before going anyway.
SHUTDOWN_GRACE_S = 5
#: Environment of a worker process: the run directory and the create_app keywords.
_RUN_DIR_ENV = "AIFAB_SERVE_RUN_DIR"
_OPTIONS_ENV = "AIFAB_SERVE_APP_OPTIONS"


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    worker: bool = True,
    reconcile_interval_s: float = 1.0,
    request_log_sample: float = 1.0,
    log_level: str = "info",
    access_log: bool = False,
    workers: int = 1,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve every deployment (and run queued jobs) until interrupted.

    Args:
        host: interface to bind (``0.0.0.0`` to accept remote callers).
        port: TCP port.
        worker: also run the jobs worker loop, so ``aifab run``/``train`` jobs progress.
        reconcile_interval_s: how often deployments are re-read from the metadata DB.
        request_log_sample: share of successful requests kept in the request log.
        log_level: uvicorn's log level.
        access_log: log one line per request (off: the request log and metrics cover it).
        workers: server processes sharing the port (the jobs worker runs once, here).
        on_ready: called once with a line saying how many deployments serve, when ``/readyz``
            first answers 200 (every deployment loaded or failed).
    """
    import uvicorn

    from aifab.serve.app import create_app

    options: dict[str, Any] = {"reconcile_interval_s": reconcile_interval_s}
    options["request_log_sample"] = request_log_sample
    common: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": log_level,
        "access_log": access_log,
        # Keys travel in headers, which uvicorn never logs; keep proxy headers off so a
        # forwarded-for value cannot be spoofed into logs either.
        "proxy_headers": False,
        # Longer than uvicorn's 5 s: pooled clients reusing an idle connection just as the
        # server closes it see a read error; 75 s is what common proxies use.
        "timeout_keep_alive": 75,
        # SIGTERM waits this long for requests in flight (a stalled upload, a long model call),
        # then cancels them: a stop must not wait on a client.
        "timeout_graceful_shutdown": SHUTDOWN_GRACE_S,
    }
    run_dir = _make_run_dir(options) if workers > 1 else None
    if run_dir is None:
        config = uvicorn.Config(create_app(**options), **common)
    else:
        config = uvicorn.Config(
            "aifab.serve.server:worker_app", factory=True, workers=workers, **common
        )
    stop = threading.Event()
    thread = _start_worker(stop) if worker else None
    if on_ready is not None:
        from aifab.serve.readiness import announce_when_ready, local_url

        announce_when_ready(local_url(host, port), on_ready, stop)
    try:
        if run_dir is None:
            _server_killing_workers_at_exit(config).run()
        else:
            from uvicorn.supervisors import Multiprocess

            Multiprocess(config, sockets=[config.bind_socket()]).run()
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=SHUTDOWN_GRACE_S)
        if run_dir is not None:
            shutil.rmtree(run_dir, ignore_errors=True)


def _server_killing_workers_at_exit(config: Any) -> Any:
    """A uvicorn server whose SIGTERM/SIGINT also kills the worker pool at once.

    Requests waiting on a worker (an image decode, a render, an agent's SQL) then answer
    right away instead of holding the graceful shutdown until their task ends.
    """
    import uvicorn

    from aifab.core import workers

    server = uvicorn.Server(config)
    handle_exit = server.handle_exit

    def on_exit(sig: int, frame: Any) -> None:
        stop = threading.Thread(target=workers.stop, kwargs={"final": True}, daemon=True)
        stop.start()
        handle_exit(sig, frame)

    server.handle_exit = on_exit  # type: ignore[method-assign]
    return server


def _make_run_dir(options: dict[str, Any]) -> Path:
    """A fresh owner-only directory for this run's shared state.

    It is named in the environment the worker processes inherit (prometheus_client reads
    its variable when imported, so it is set before any worker starts).
    """
    from aifab.core.workspace import get_workspace

    run_dir = get_workspace().root / "run" / f"serve-{os.getpid()}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a previous run of a reused pid
    (run_dir / "metrics").mkdir(parents=True, mode=0o700)
    os.environ[_RUN_DIR_ENV] = str(run_dir)
    os.environ[_OPTIONS_ENV] = json.dumps(options)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(run_dir / "metrics")
    return run_dir


def worker_app() -> Any:
    """The app of one worker process of ``serve(workers=N)`` (a uvicorn factory)."""
    from aifab.serve.app import create_app

    options = json.loads(os.environ[_OPTIONS_ENV])
    return create_app(**options, shared_dir=Path(os.environ[_RUN_DIR_ENV]))


def _start_worker(stop: threading.Event) -> threading.Thread:
    """The jobs worker loop on a thread that lives as long as the server (its replicas too)."""

    def run() -> None:
        from aifab.jobs.worker import Worker

        try:
            Worker().run(stop)
        except Exception:  # noqa: BLE001 - a broken worker must not take serving down
            log.exception("the jobs worker stopped")

    thread = threading.Thread(target=run, name="aifab-jobs-worker", daemon=True)
    thread.start()
    return thread
