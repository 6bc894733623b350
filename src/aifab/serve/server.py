"""``serve()``: run the app under uvicorn, with the jobs worker on a long-lived thread."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("aifab.serve")

__all__ = ["SHUTDOWN_GRACE_S", "serve"]

#: Seconds a stop waits for requests in flight and for the jobs worker before going anyway.
SHUTDOWN_GRACE_S = 5


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    worker: bool = True,
    reconcile_interval_s: float = 1.0,
    request_log_sample: float = 1.0,
    log_level: str = "info",
    access_log: bool = False,
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
    """
    import uvicorn

    from aifab.serve.app import create_app

    app = create_app(
        reconcile_interval_s=reconcile_interval_s, request_log_sample=request_log_sample
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=access_log,
        # Keys travel in headers, which uvicorn never logs; keep proxy headers off so a
        # forwarded-for value cannot be spoofed into logs either.
        proxy_headers=False,
        # Longer than uvicorn's 5 s: pooled clients reusing an idle connection just as the
        # server closes it see a read error; 75 s is what common proxies use.
        timeout_keep_alive=75,
        # SIGTERM waits this long for requests in flight (a stalled upload, a long model call),
        # then cancels them: a stop must not wait on a client.
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
    server = uvicorn.Server(config)
    stop = threading.Event()
    thread = _start_worker(stop) if worker else None
    try:
        server.run()
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=SHUTDOWN_GRACE_S)


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
