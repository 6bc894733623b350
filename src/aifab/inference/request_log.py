"""The sampled request log: what each served request got and gave, written off the hot path.

:class:`RequestLogger` decides sampling before an entry is built (:meth:`RequestLogger.wants`),
queues entries in a bounded queue (over it, entries are dropped and counted rather than slowing
the request) and a background thread writes them to the ``request_log`` table in batches;
monitoring and drift detection read it back.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from sqlalchemy import insert, select

from aifab.core.db import lock_aggregate, session_scope
from aifab.core.errors import InvalidInputError
from aifab.inference.log_records import fit_records
from aifab.inference.tables import RequestLogRow

__all__ = ["RequestLogger", "recent_requests"]

log = logging.getLogger("aifab.inference.request_log")

#: Entries waiting beyond this are dropped (and counted): a stalled DB must not eat the memory
#: (an entry holds up to 100 records) nor make the request path wait.
MAX_QUEUED = 10_000
#: Inputs or outputs larger than this (as JSON) are reduced (records that fit, images as
#: thumbnails: :mod:`aifab.inference.log_records`) or else replaced by a note of their size.
MAX_FIELD_BYTES = 64 * 1024
_BATCH = 500


def _json_field(value: Any) -> dict[str, Any] | None:
    """A JSON-safe dict for the ``input``/``output`` columns (big values become a size note)."""
    if value is None:
        return None
    field = value if isinstance(value, dict) else {"value": value}
    coerced = False

    def as_str(obj: Any) -> str:
        nonlocal coerced
        coerced = True
        return str(obj)

    text = json.dumps(field, default=as_str)
    if len(text) > MAX_FIELD_BYTES:
        # Records (images as thumbnails) that fit, so monitors still see this traffic.
        fitted = fit_records(json.loads(text), MAX_FIELD_BYTES)
        return fitted or {"truncated": True, "bytes": len(text)}
    if not coerced:  # plain JSON already: the column serializes it as this text
        return field
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _row(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "ts": float(entry.get("ts") or time.time()),
        "deployment": str(entry.get("deployment") or "")[:100],
        "model_version": entry.get("model_version"),
        "key_id": entry.get("key_id"),
        "route": str(entry.get("route") or "")[:100],
        "status": int(entry.get("status") or 0),
        "latency_ms": float(entry.get("latency_ms") or 0.0),
        "input": _json_field(entry.get("input")),
        "output": _json_field(entry.get("output")),
        "tokens": int(entry.get("tokens") or 0),
        "request_id": entry.get("request_id"),
    }


class RequestLogger:
    """Queue request entries and write them in batches from one background thread.

    Args:
        sample_rate: share of successful requests kept (0-1); errors (status >= 400) are
            always kept, since they are what operators look for.
        flush_interval_s: how often the thread writes what has queued up.
        on_drop: called once per entry dropped because the queue is full (e.g. a Prometheus
            counter's ``inc``).
    """

    def __init__(
        self,
        sample_rate: float = 1.0,
        flush_interval_s: float = 0.5,
        on_drop: Callable[[], None] | None = None,
    ) -> None:
        if not 0.0 <= sample_rate <= 1.0:
            raise InvalidInputError(f"sample_rate {sample_rate}: expected 0 to 1")
        if flush_interval_s <= 0:
            raise InvalidInputError(f"flush_interval_s {flush_interval_s}: expected > 0")
        self.sample_rate = sample_rate
        self.flush_interval_s = flush_interval_s
        self.dropped = 0
        self.on_drop = on_drop
        self._queue: deque[dict[str, Any]] = deque()
        self._cond = threading.Condition()
        self._queued = 0  # entries accepted so far
        self._done = 0  # entries written (or given up on) so far
        self._flush_target = 0  # a flush() waits until _done reaches this
        self._closed = False
        self._thread: threading.Thread | None = None
        self._rng = random.Random()

    def wants(self, status: int) -> bool:
        """Whether an entry of this status would be kept: sampled in, and room in the queue.

        Callers build the entry only when it is wanted; an entry refused for lack of room is
        counted as dropped here.
        """
        if status < 400 and self.sample_rate < 1.0 and self._rng.random() >= self.sample_rate:
            return False
        if len(self._queue) >= MAX_QUEUED or self._closed:
            if not self._closed:
                self._drop()
            return False
        return True

    def _drop(self) -> None:
        self.dropped += 1
        if self.on_drop is not None:
            try:
                self.on_drop()
            except Exception:  # noqa: BLE001 - counting must not fail a request
                log.exception("request log: on_drop failed")

    def log(self, entry: dict[str, Any]) -> None:
        """Sample and queue one request (never blocks on the DB).

        ``entry`` keys: ts, deployment, model_version, key_id, route, status, latency_ms,
        input, output, tokens. Successes are kept with probability ``sample_rate``.
        """
        if self.wants(int(entry.get("status") or 0)):
            self.append(entry)

    def append(self, entry: dict[str, Any]) -> None:
        """Queue an entry already sampled in by :meth:`wants` (the caller's dict is kept)."""
        with self._cond:
            if self._closed:
                return
            if len(self._queue) >= MAX_QUEUED:
                self._drop()
                return
            self._queue.append(entry)
            self._queued += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="aifab-request-log", daemon=True
                )
                self._thread.start()
            elif len(self._queue) == _BATCH:
                self._cond.notify_all()

    def flush(self, timeout: float | None = 30.0) -> None:
        """Block until every entry logged so far is written."""
        with self._cond:
            target = self._queued
            self._flush_target = max(self._flush_target, target)
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._done >= target or self._thread is None, timeout)

    def close(self) -> None:
        """Write what is queued and stop the thread; later entries are ignored."""
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=30.0)

    def _ready(self) -> bool:
        """Whether the thread should write now rather than let the batch grow."""
        return (
            self._closed
            or len(self._queue) >= _BATCH
            or (bool(self._queue) and self._flush_target > self._done)
        )

    def _loop(self) -> None:
        while True:
            with self._cond:
                # Waiting out the interval batches a trickle of requests into one transaction.
                self._cond.wait_for(self._ready, self.flush_interval_s)
                if not self._queue and self._closed:
                    self._thread = None
                    self._cond.notify_all()
                    return
                batch = [self._queue.popleft() for _ in range(min(_BATCH, len(self._queue)))]
            if batch:
                self._write(batch)
            with self._cond:
                self._done += len(batch)
                self._cond.notify_all()

    def _write(self, batch: list[dict[str, Any]]) -> None:
        rows = []
        for entry in batch:
            try:
                rows.append(_row(entry))
            except (TypeError, ValueError) as exc:
                log.warning("skipping a malformed request log entry: %s", exc)
        if not rows:
            return
        try:
            with session_scope() as s:
                # The cost collector reads past a cursor on the id: it waits for this insert,
                # so ids it has passed are never committed after it (see ops.cost.ledger).
                lock_aggregate(s, "cost-source", "request_log", shared=True)
                s.execute(insert(RequestLogRow), rows)
        except Exception:  # noqa: BLE001 - logging must never take serving down
            log.exception("could not write %d request log entries", len(rows))


def recent_requests(deployment: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """The newest logged requests first, optionally of one deployment.

    Raises:
        InvalidInputError: ``limit`` is not 1 to 10000.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise InvalidInputError(f"limit {limit!r}: expected 1 to 10000")
    q = select(RequestLogRow).order_by(RequestLogRow.id.desc()).limit(limit)
    if deployment:
        q = q.where(RequestLogRow.deployment == deployment)
    with session_scope(readonly=True) as s:
        return [
            {
                "id": r.id,
                "ts": r.ts,
                "deployment": r.deployment,
                "model_version": r.model_version,
                "key_id": r.key_id,
                "route": r.route,
                "status": r.status,
                "latency_ms": r.latency_ms,
                "input": r.input,
                "output": r.output,
                "tokens": r.tokens,
                "request_id": r.request_id,
            }
            for r in s.scalars(q)
        ]
