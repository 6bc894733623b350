"""Writes agent steps to the metadata DB on a background thread, in batches.

A step is queued as soon as it ends and the loop goes on without waiting. The writer commits
what is queued when a run asks for it (:meth:`TraceWriter.flush`, at the run's end) or when
the oldest queued write is ``max_delay_s`` old, so a short run costs one commit, and a long
run cut short (a killed process) loses at most its last ``max_delay_s`` of steps. A commit per
step cost more than the loop itself: each one took the DB's write lock and ran SQLAlchemy on
the interpreter the loop needs while it waited on the model.
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading
import time
from collections.abc import Callable

from sqlalchemy.orm import Session

from aifab.core.db import session_scope
from aifab.core.settings import get_settings

__all__ = ["TraceWriter", "Write", "trace_writer"]

#: One write: it gets the batch's open transaction.
Write = Callable[[Session], None]

_log = logging.getLogger("aifab.agents")


class TraceWriter:
    """A queue of writes and the thread that commits them, oldest first.

    Args:
        max_delay_s: the longest a queued write waits for its commit when nobody flushes.
        max_batch: writes committed in one transaction at most.
    """

    def __init__(self, max_delay_s: float = 0.25, max_batch: int = 256) -> None:
        self.max_delay_s = max_delay_s
        self.max_batch = max_batch
        self._cond = threading.Condition()
        # (ticket, DB URL at queue time, write): the URL is fixed when the write is queued, so
        # a write never lands in a workspace that was switched to after it (tests, embedding).
        self._pending: collections.deque[tuple[int, str, Write]] = collections.deque()
        self._oldest = 0.0
        self._queued = 0
        self._written = 0
        self._flush_to = 0
        self._failed: collections.deque[int] = collections.deque(maxlen=4096)
        self._thread = threading.Thread(target=self._run, name="aifab-agent-traces", daemon=True)
        self._thread.start()

    def apply(self, write: Write) -> int:
        """Queue a write into the current workspace's metadata DB; returns its ticket."""
        url = get_settings().resolved_db_url
        with self._cond:
            self._queued += 1
            if not self._pending:
                self._oldest = time.monotonic()
                self._cond.notify_all()  # the writer starts the delay's clock
            self._pending.append((self._queued, url, write))
            if len(self._pending) >= self.max_batch:
                self._cond.notify_all()
            return self._queued

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Commit everything queued so far, and wait for it; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            target = self._queued
            self._flush_to = max(self._flush_to, target)
            self._cond.notify_all()
            while self._written < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def failed(self, ticket: int) -> bool:
        """Whether the write with this ticket could not be committed (it was logged)."""
        with self._cond:
            return ticket in self._failed

    def _next_batch(self) -> list[tuple[int, str, Write]]:
        with self._cond:
            while True:
                if self._pending:
                    due = self._oldest + self.max_delay_s
                    now = time.monotonic()
                    if (
                        self._flush_to > self._written
                        or len(self._pending) >= self.max_batch
                        or now >= due
                    ):
                        break
                    self._cond.wait(due - now)
                else:
                    self._cond.wait()
            size = min(self.max_batch, len(self._pending))
            batch = [self._pending.popleft() for _ in range(size)]
            self._oldest = time.monotonic()
            return batch

    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            by_url: dict[str, list[tuple[int, str, Write]]] = {}
            for item in batch:
                by_url.setdefault(item[1], []).append(item)
            failed = [t for url, writes in by_url.items() for t in self._commit(url, writes)]
            with self._cond:
                self._failed.extend(failed)
                self._written += len(batch)
                self._cond.notify_all()

    @staticmethod
    def _commit(url: str, writes: list[tuple[int, str, Write]]) -> list[int]:
        """Commit the writes in one transaction; if that fails, each alone. Failed tickets."""
        try:
            with session_scope(url) as s:
                for _, _, write in writes:
                    write(s)
            return []
        except Exception:  # noqa: BLE001 - one bad write must not lose the others
            if len(writes) == 1:
                _log.exception("could not write an agent trace row")
                return [writes[0][0]]
        return [t for item in writes for t in TraceWriter._commit(url, [item])]


_writer: TraceWriter | None = None
_lock = threading.Lock()


def trace_writer() -> TraceWriter:
    """The process's trace writer (started on first use)."""
    global _writer
    with _lock:
        if _writer is None:
            _writer = TraceWriter()
            # A process that exits normally (a server stopped mid-run) commits what is queued.
            atexit.register(_writer.flush, 5.0)
        return _writer
