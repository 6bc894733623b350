"""Writes agent steps to the metadata DB on a background thread, in batches.

A step is queued as soon as it ends and committed within milliseconds, so a run cut short still
leaves its trace, while the loop never waits for a commit (one commit per step cost several ms).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from aifab.agents.tables import AgentStepRow
from aifab.core.db import session_scope

__all__ = ["TraceWriter", "trace_writer"]


class TraceWriter:
    """A queue of step rows and the thread that commits them, oldest first."""

    def __init__(self, max_batch: int = 256) -> None:
        self.max_batch = max_batch
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue()
        self._done = threading.Condition()
        self._queued = 0
        self._written = 0
        self._thread = threading.Thread(target=self._run, name="aifab-agent-traces", daemon=True)
        self._thread.start()

    def put(self, row: dict[str, Any]) -> None:
        """Queue one ``agent_steps`` row (its columns as a dict)."""
        with self._done:
            self._queued += 1
        self._queue.put(row)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything queued so far is committed; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._done:
            target = self._queued
            while self._written < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)
        return True

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                with session_scope() as s:
                    s.add_all(AgentStepRow(**row) for row in batch)
            except Exception:  # noqa: BLE001 - a failed write must not stop later traces
                import logging

                logging.getLogger("aifab.agents").exception("could not write %d steps", len(batch))
            with self._done:
                self._written += len(batch)
                self._done.notify_all()


_writer: TraceWriter | None = None
_lock = threading.Lock()


def trace_writer() -> TraceWriter:
    """The process's trace writer (started on first use)."""
    global _writer
    with _lock:
        if _writer is None:
            _writer = TraceWriter()
        return _writer
