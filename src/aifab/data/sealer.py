"""Sealing pushed records off the caller's thread, at most a few commits at once.

A few daemon threads run :func:`~aifab.data.append.flush_appends`, so a costly commit never pins
a request thread and a stop never waits for one.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future

from aifab.core.actor import acting_as
from aifab.core.errors import ConflictError
from aifab.data.catalog import VersionInfo

log = logging.getLogger("aifab.data.sealer")

__all__ = ["BackgroundSealer"]


class BackgroundSealer:
    """Seals datasets' pending records on daemon threads (a stop never waits for them).

    A dataset asked for again while its seal is still queued shares that seal: it has not
    claimed the pending rows yet, so it takes the new ones too.

    Args:
        max_concurrent: commits running at once (threads).
        max_queued: datasets waiting; beyond it :meth:`submit` refuses.
    """

    def __init__(self, max_concurrent: int = 2, max_queued: int = 256) -> None:
        self.max_concurrent = max_concurrent
        self._queue: queue.Queue[tuple[str, str]] = queue.Queue(max_queued)
        self._waiting: dict[str, Future[VersionInfo | None]] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def submit(self, name: str, *, actor: str) -> Future[VersionInfo | None]:
        """Queue a seal of dataset ``name`` as ``actor``; the future holds the sealed version.

        Raises:
            ConflictError: too many datasets already wait to be sealed (retry later).
        """
        with self._lock:
            waiting = self._waiting.get(name)
            if waiting is not None:
                return waiting
            future: Future[VersionInfo | None] = Future()
            try:
                self._queue.put_nowait((name, actor))
            except queue.Full:
                raise ConflictError(
                    f"{self._queue.maxsize} datasets are waiting to be sealed; retry later"
                ) from None
            self._waiting[name] = future
            if len(self._threads) < self.max_concurrent:
                self._start_thread()
        return future

    def _start_thread(self) -> None:
        thread = threading.Thread(
            target=self._run, name=f"aifab-sealer-{len(self._threads)}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _run(self) -> None:
        from aifab.data.append import flush_appends

        while True:
            name, actor = self._queue.get()
            with self._lock:
                future = self._waiting.pop(name)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                with acting_as(actor):
                    future.set_result(flush_appends(name))
            except Exception as exc:  # noqa: BLE001 - handed to whoever waits on the seal
                log.warning("sealing dataset %s failed: %s", name, exc)
                future.set_exception(exc)
