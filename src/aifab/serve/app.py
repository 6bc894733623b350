"""The FastAPI app: the gateway (keys, limits, routing) and every deployment behind it.

``create_app`` wires the routers and error handlers; its lifespan starts the deployment
manager, the request logger and the key limits, and stops them on shutdown.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from aifab.core import workers
from aifab.serve.errors import install_error_handlers
from aifab.serve.guard import RequestGuard
from aifab.serve.metrics import Metrics

log = logging.getLogger("aifab.serve")

__all__ = ["create_app"]

#: Modules holding the worker pool's tasks: its fork server imports them once.
WORKER_PRELOAD = ("aifab.data.image_decode", "aifab.data.browse", "aifab.prompts.template")

_ROUTERS = (
    "aifab.serve.routes.health",
    "aifab.serve.routes.predict",
    "aifab.serve.routes.openai",
    "aifab.serve.routes.responses",
    "aifab.serve.routes.deployments",
    "aifab.serve.routes.keys",
    "aifab.serve.routes.data",
    "aifab.serve.routes.requests",
    "aifab.serve.routes.cost",
    "aifab.serve.routes.explain",
    "aifab.serve.routes.prompts",
    "aifab.serve.routes.kb",
    "aifab.serve.routes.agents",
    "aifab.serve.routes.monitors",
    # The dashboard sits above the gateway (it signs people in with the gateway's keys); it is
    # included by name like the routers above, so serving does not import it.
    "aifab.web.routes",
)


def create_app(
    *,
    reconcile_interval_s: float = 1.0,
    request_log_sample: float = 1.0,
    shared_dir: Path | None = None,
) -> FastAPI:
    """The server app.

    Args:
        reconcile_interval_s: how often the deployments table is polled for changes.
        request_log_sample: share of successful requests written to the request log (0-1);
            errors are always logged.
        shared_dir: the run directory shared by the processes of ``aifab serve --workers``
            (rate-limit buckets there); None for a single process.

    Returns:
        The app; serve it with uvicorn (``aifab serve`` does).
    """
    from aifab.inference.request_log import RequestLogger
    from aifab.ops.cost.budget import BudgetGate
    from aifab.serve.limits import TokenQuota
    from aifab.serve.manager import DeploymentManager
    from aifab.serve.store_limits import gateway_limiters

    metrics = Metrics()
    from prometheus_client import Counter

    log_dropped = Counter(
        "aifab_request_log_dropped",
        "Request-log entries dropped because the writer fell behind (the queue was full).",
        registry=metrics.registry,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from aifab.core.db import get_engine

        get_engine()  # a fresh workspace gets its schema before the first query
        app.state.request_log = RequestLogger(
            sample_rate=request_log_sample, on_drop=log_dropped.inc
        )
        limiter, failures = gateway_limiters(shared_dir)
        app.state.limiter = limiter
        if getattr(app.state, "auth_failures", None) is None:  # a test may set its own first
            app.state.auth_failures = failures
        app.state.quota = TokenQuota()
        app.state.budget_gate = BudgetGate()
        await asyncio.to_thread(app.state.budget_gate.refresh)
        manager = DeploymentManager(
            interval_s=reconcile_interval_s,
            on_batch=metrics.observe_batch,
            on_ready=metrics.set_ready,
        )
        app.state.manager = manager
        # Image decodes, renders and agents' SQL run in killable, memory-capped processes.
        workers.start(preload=WORKER_PRELOAD)
        await manager.start()
        try:
            yield
        finally:
            workers.stop()  # kills whatever they run: shutdown does not wait on a caller's work
            await manager.stop()
            app.state.request_log.close()
            close = getattr(app.state.quota, "close", None)
            if close is not None:
                close()
            sealer = getattr(app.state, "sealer", None)  # started by the first push's seal
            if sealer is not None:
                sealer.close()

    app = FastAPI(
        title="aifab",
        summary="Models behind one gateway: predictions, OpenAI-compatible LMs, keys, canaries.",
        version=_version(),
        lifespan=lifespan,
    )
    app.state.metrics = metrics
    _add_ops_metrics(metrics)
    install_error_handlers(app)
    app.add_middleware(RequestGuard)
    for module in _ROUTERS:
        if importlib.util.find_spec(module) is None:
            log.warning("router %s is not installed; its routes are off", module)
            continue
        app.include_router(importlib.import_module(module).router)
    return app


def _add_ops_metrics(metrics: Metrics) -> None:
    """Export monitor results and alerts on ``/metrics`` (read from the DB at scrape time)."""
    if importlib.util.find_spec("aifab.ops.metrics") is None:
        return
    from aifab.ops.metrics import OpsCollector

    metrics.registry.register(OpsCollector())


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("aifab")
    except Exception:  # noqa: BLE001 - running from a source tree without metadata
        return "0"
