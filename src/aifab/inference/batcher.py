"""Dynamic batching: concurrent requests packed into one model call on dedicated threads.

Requests queue per caller key, in arrival order; one worker at a time packs a batch taking the
keys' heads in turn (until ``max_batch_size`` items or ``max_wait_ms`` after the first request),
then runs it while the next worker packs the next batch, so ``workers`` batches can run at once.
A request bigger than ``chunk_items`` is queued as chunks, so one key's big request shares the
model with other keys' requests chunk by chunk instead of holding it for its whole length.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Batcher", "BatcherClosedError"]

log = logging.getLogger(__name__)


class BatcherClosedError(RuntimeError):
    """The batcher was closed before this request ran (the server answers 503)."""


@dataclass
class _Request:
    items: list[Any]
    future: asyncio.Future[list[Any]]
    loop: asyncio.AbstractEventLoop
    arrived: float


def _settle(future: asyncio.Future[list[Any]], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller gave up (cancelled) meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class Batcher:
    """Runs ``fn`` over batches of items from many concurrent ``submit`` calls."""

    def __init__(
        self,
        fn: Callable[[list[Any]], list[Any]],
        *,
        max_batch_size: int = 1,
        max_wait_ms: float = 0.0,
        workers: int = 1,
        name: str = "",
        on_batch: Callable[[int], None] | None = None,
        chunk_items: int | None = None,
    ) -> None:
        """Start ``workers`` threads running ``fn``.

        Args:
            fn: items -> one result per item, in order (e.g. ``handler.predict``).
            max_batch_size: most items per ``fn`` call (a bigger request runs alone).
            max_wait_ms: how long a batch waits for more requests after its first one.
            workers: threads calling ``fn``, so this many batches can run at once.
            name: shown in thread names and logs.
            on_batch: called with each batch's size (e.g. for a histogram).
            chunk_items: split requests with more items into chunks of this many (None: never).
        """
        if max_batch_size < 1 or workers < 1 or max_wait_ms < 0:
            raise ValueError("max_batch_size and workers must be >= 1, max_wait_ms >= 0")
        if chunk_items is not None and chunk_items < 1:
            raise ValueError("chunk_items must be >= 1")
        self.fn, self.name, self.on_batch = fn, name, on_batch
        self.max_batch_size, self.max_wait = max_batch_size, max_wait_ms / 1000.0
        self.chunk_items = chunk_items
        # key -> its queued requests; the first key is the next to be served (round robin).
        self._queues: OrderedDict[str, deque[_Request]] = OrderedDict()
        self._last: str | None = None
        self._cond = threading.Condition()
        # Only one worker packs a batch at a time: new arrivals join that batch instead of
        # being raced for by idle workers.
        self._packing = threading.Lock()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name=f"batcher-{name}-{i}", daemon=True)
            for i in range(workers)
        ]
        for t in self._threads:
            t.start()

    async def submit(self, items: list[Any], key: str = "") -> list[Any]:
        """Results of ``fn`` for ``items``, in order.

        Args:
            items: the request's items.
            key: the caller (e.g. the API key id); keys take turns when several wait.

        Raises:
            BatcherClosedError: the batcher is closed, or closed before the request ran.
            Exception: whatever ``fn`` raised for the batch holding this request.
        """
        if not items:
            return []
        loop = asyncio.get_running_loop()
        size = self.chunk_items or len(items)
        now = time.monotonic()
        reqs = [
            _Request(list(items[i : i + size]), loop.create_future(), loop, now)
            for i in range(0, len(items), size)
        ]
        with self._cond:
            if self._closed:
                raise BatcherClosedError(f"batcher {self.name!r} is closed")
            self._queues.setdefault(key, deque()).extend(reqs)
            last = self._last
            if last is not None and last in self._queues:  # served last, stays last in turn
                self._queues.move_to_end(last)
            self._cond.notify()
        if len(reqs) == 1:
            return await reqs[0].future
        parts = await asyncio.gather(*(r.future for r in reqs))
        return [x for part in parts for x in part]

    def _next(self, room: int | None) -> _Request | None:
        """Pop the head of the first key in turn whose head fits ``room`` items (None: any).

        The key served goes to the back of the turn order.
        """
        for key, queue in self._queues.items():
            if room is None or len(queue[0].items) <= room:
                req = queue.popleft()
                self._last = key
                if queue:
                    self._queues.move_to_end(key)
                else:
                    del self._queues[key]
                return req
        return None

    async def close(self, *, drain: bool = False) -> None:
        """Stop taking requests; let running batches finish; then stop the workers.

        Args:
            drain: run the requests already queued too (e.g. when a deployment swaps to a new
                version); by default they fail with BatcherClosedError.
        """
        with self._cond:
            self._closed = True
            pending = [] if drain else [r for q in self._queues.values() for r in q]
            if not drain:
                self._queues.clear()
            self._cond.notify_all()
        error = BatcherClosedError(f"batcher {self.name!r} closed before the request ran")
        for req in pending:
            self._reply(req, None, error)
        await asyncio.to_thread(self._join)

    def _join(self) -> None:
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()

    def _work(self) -> None:
        while True:
            batch = self._pack()
            if batch is None:
                return
            self._run(batch)

    def _pack(self) -> list[_Request] | None:
        """The next batch: the queue's head plus what fits before the size or time limit."""
        with self._packing, self._cond:
            while not self._queues:
                if self._closed:
                    return None
                self._cond.wait()
            first = self._next(None)
            assert first is not None
            batch, size = [first], len(first.items)
            deadline = first.arrived + self.max_wait
            while size < self.max_batch_size:
                while (req := self._next(self.max_batch_size - size)) is not None:
                    batch.append(req)
                    size += len(req.items)
                if self._queues or size >= self.max_batch_size or self._closed:
                    break  # full, or the next request does not fit: it heads the next batch
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return batch

    def _run(self, batch: list[_Request]) -> None:
        batch = [req for req in batch if not req.future.cancelled()]  # callers that gave up
        if not batch:
            return
        items = [x for req in batch for x in req.items]
        if self.on_batch is not None:
            try:
                self.on_batch(len(items))
            except Exception:  # noqa: BLE001 - metrics must not fail requests
                log.exception("batcher %s: on_batch failed", self.name)
        try:
            results = self.fn(items)
            if len(results) != len(items):
                raise RuntimeError(
                    f"batcher {self.name!r}: fn returned {len(results)} results "
                    f"for {len(items)} items"
                )
        except BaseException as exc:  # noqa: BLE001 - every caller of the batch gets it
            for req in batch:
                self._reply(req, None, exc)
            if not isinstance(exc, Exception):
                raise
            return
        start = 0
        for req in batch:
            end = start + len(req.items)
            self._reply(req, results[start:end], None)
            start = end

    @staticmethod
    def _reply(req: _Request, result: Any, error: BaseException | None) -> None:
        # RuntimeError: the caller's event loop is closed, so nobody is waiting.
        with contextlib.suppress(RuntimeError):
            req.loop.call_soon_threadsafe(_settle, req.future, result, error)
