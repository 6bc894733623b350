"""Sealing pushed records away from the server: a few niced worker processes, bounded.

Worker processes run :func:`~aifab.data.append.flush_appends`, so a costly commit (the profile
of a wide table) pins no request thread, takes no share of the server's GIL, and yields the CPU
to requests. A worker dies with its parent; a claim it leaves is handed back on the next flush.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from concurrent.futures import Future, ProcessPoolExecutor

from aifab.core.actor import acting_as
from aifab.core.errors import ConflictError
from aifab.data.catalog import VersionInfo

log = logging.getLogger("aifab.data.sealer")

__all__ = ["BackgroundSealer"]

#: Scheduling niceness of the workers: requests first, seals with what is left.
WORKER_NICENESS = 10


def _init_worker() -> None:
    """Lower the worker's priority, and have Linux kill it when the server goes away."""
    try:
        os.nice(WORKER_NICENESS)
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the worker merely outlives a killed server
        pass


def _seal(name: str, actor: str) -> VersionInfo | None:
    from aifab.data.append import flush_appends

    with acting_as(actor):
        return flush_appends(name)


class BackgroundSealer:
    """Seals datasets' pending records in at most ``max_concurrent`` worker processes.

    A dataset asked for again while its seal has not started shares that seal: it has not
    claimed the pending rows yet, so it takes the new ones too.

    Args:
        max_concurrent: commits running at once (worker processes, started on first use).
        max_queued: seals waiting or running; beyond it :meth:`submit` refuses.
    """

    def __init__(self, max_concurrent: int = 2, max_queued: int = 256) -> None:
        self.max_concurrent = max_concurrent
        self.max_queued = max_queued
        self._futures: dict[str, Future[VersionInfo | None]] = {}
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None

    def submit(self, name: str, *, actor: str) -> Future[VersionInfo | None]:
        """Queue a seal of dataset ``name`` as ``actor``; the future holds the sealed version.

        Raises:
            ConflictError: too many seals already wait (retry later).
        """
        with self._lock:
            queued = self._futures.get(name)
            if queued is not None and not queued.running() and not queued.done():
                return queued
            self._futures = {k: f for k, f in self._futures.items() if not f.done()}
            if len(self._futures) >= self.max_queued:
                raise ConflictError(f"{self.max_queued} seals are waiting; retry later")
            future = self._executor().submit(_seal, name, actor)
            self._futures[name] = future
        future.add_done_callback(lambda f: _log_failure(name, f))
        return future

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            import multiprocessing

            # spawn: a fork would copy the server's threads, locks and DB connections.
            self._pool = ProcessPoolExecutor(
                self.max_concurrent,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
            )
        return self._pool

    def close(self) -> None:
        """Stop the workers without waiting for running seals (their claims are recovered)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def _log_failure(name: str, future: Future[VersionInfo | None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("sealing dataset %s failed: %s", name, future.exception())
