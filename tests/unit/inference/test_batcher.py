"""The dynamic batcher with plain Python functions: packing, waiting, errors, close, workers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from aifab.inference.batcher import Batcher, BatcherClosedError


def doubled(items: list[Any]) -> list[Any]:
    return [x * 2 for x in items]


def run(coro_fn: Callable[[], Any]) -> Any:
    return asyncio.run(coro_fn())


def test_requests_pack_up_to_max_batch_size_and_results_go_back_in_order() -> None:
    sizes: list[int] = []

    async def main() -> list[list[int]]:
        # A long wait: batches close because they are full, not because time ran out.
        b = Batcher(doubled, max_batch_size=4, max_wait_ms=5000, on_batch=sizes.append)
        try:
            reqs = [[10 * i + 1, 10 * i + 2] for i in range(4)]
            return list(await asyncio.gather(*(b.submit(r) for r in reqs)))
        finally:
            await b.close()

    out = run(main)
    assert out == [[2, 4], [22, 24], [42, 44], [62, 64]]
    assert sizes == [4, 4]


def test_max_wait_bounds_the_wait_for_more_requests() -> None:
    sizes: list[int] = []

    async def main() -> list[list[int]]:
        b = Batcher(doubled, max_batch_size=64, max_wait_ms=300, on_batch=sizes.append)
        try:
            first = await b.submit([1])  # nobody else comes: it runs once the wait is over
            rest = await asyncio.gather(b.submit([2]), b.submit([3, 4]))
            return [first, *rest]
        finally:
            await b.close()

    assert run(main) == [[2], [4], [6, 8]]
    assert sizes == [1, 3]


def test_a_request_larger_than_the_batch_runs_alone_and_one_that_does_not_fit_waits() -> None:
    sizes: list[int] = []
    calls: list[list[int]] = []

    def fn(items: list[int]) -> list[int]:
        calls.append(list(items))
        return doubled(items)

    async def main() -> list[list[int]]:
        b = Batcher(fn, max_batch_size=4, max_wait_ms=5000, on_batch=sizes.append)
        try:
            return list(
                await asyncio.gather(
                    b.submit(list(range(10))),
                    b.submit([1, 2, 3]),
                    b.submit([4, 5, 6]),
                    b.submit([7]),
                )
            )
        finally:
            await b.close()

    out = run(main)
    assert out == [[x * 2 for x in range(10)], [2, 4, 6], [8, 10, 12], [14]]
    # 10 > 4 runs alone; 3 + 3 > 4, so the second three start the next batch at once.
    assert sizes == [10, 3, 4] and calls[0] == list(range(10))


def test_no_batching_by_default_and_empty_requests_skip_fn() -> None:
    sizes: list[int] = []

    async def main() -> list[list[int]]:
        b = Batcher(doubled, on_batch=sizes.append)
        try:
            return list(await asyncio.gather(b.submit([1]), b.submit([2]), b.submit([])))
        finally:
            await b.close()

    assert run(main) == [[2], [4], []]
    assert sizes == [1, 1]


def test_an_error_reaches_every_caller_of_its_batch_and_the_batcher_keeps_working() -> None:
    def fn(items: list[Any]) -> list[Any]:
        if "boom" in items:
            raise ValueError("boom in the batch")
        return doubled(items)

    async def main() -> tuple[list[Any], list[Any]]:
        # The three requests hold 4 items: exactly one full batch, whatever the timing.
        b = Batcher(fn, max_batch_size=4, max_wait_ms=5000)
        try:
            failed = await asyncio.gather(
                b.submit(["boom"]), b.submit([1]), b.submit([2, 3]), return_exceptions=True
            )
            return list(failed), await b.submit([5, 6, 7, 8])  # full: no wait
        finally:
            await b.close()

    failed, after = run(main)
    assert len(failed) == 3
    assert all(isinstance(e, ValueError) and str(e) == "boom in the batch" for e in failed)
    assert after == [10, 12, 14, 16]


def test_a_wrong_number_of_results_is_an_error_for_the_callers() -> None:
    async def main() -> None:
        b = Batcher(lambda items: items[:-1])
        try:
            with pytest.raises(RuntimeError, match="returned 1 results for 2 items"):
                await b.submit([1, 2])
        finally:
            await b.close()

    run(main)


def test_close_fails_pending_requests_and_lets_the_running_batch_finish() -> None:
    started, release = threading.Event(), threading.Event()

    def fn(items: list[Any]) -> list[Any]:
        started.set()
        release.wait(30)
        return doubled(items)

    async def main() -> tuple[Any, Any, Any]:
        b = Batcher(fn)
        running = asyncio.create_task(b.submit([1]))
        await asyncio.to_thread(started.wait, 30)
        pending = asyncio.create_task(b.submit([2]))  # the only worker is busy: it queues
        await asyncio.sleep(0)
        closing = asyncio.create_task(b.close())
        pending_error = await asyncio.gather(pending, return_exceptions=True)
        release.set()
        await closing
        with pytest.raises(BatcherClosedError):
            await b.submit([3])
        return await running, pending_error[0], closing.result()

    done, pending_error, closed = run(main)
    assert done == [2]
    assert isinstance(pending_error, BatcherClosedError)
    assert closed is None


def test_close_with_drain_runs_the_queued_requests() -> None:
    started, release = threading.Event(), threading.Event()

    def fn(items: list[Any]) -> list[Any]:
        started.set()
        release.wait(30)
        return doubled(items)

    async def main() -> list[Any]:
        b = Batcher(fn)
        running = asyncio.create_task(b.submit([1]))
        await asyncio.to_thread(started.wait, 30)
        queued = asyncio.create_task(b.submit([2]))
        await asyncio.sleep(0)
        closing = asyncio.create_task(b.close(drain=True))
        await asyncio.sleep(0)
        with pytest.raises(BatcherClosedError):
            await b.submit([3])  # closed to new requests at once
        release.set()
        await closing
        return [await running, await queued]

    assert run(main) == [[2], [4]]


def test_workers_run_batches_concurrently() -> None:
    # Each call waits for another call to be running at the same time: with one worker this
    # would time out (BrokenBarrierError).
    barrier = threading.Barrier(2, timeout=30)
    threads: set[str] = set()

    def fn(items: list[Any]) -> list[Any]:
        threads.add(threading.current_thread().name)
        barrier.wait()
        return doubled(items)

    async def main() -> list[list[int]]:
        b = Batcher(fn, max_batch_size=1, workers=2, name="pair")
        try:
            return list(await asyncio.gather(b.submit([1]), b.submit([2])))
        finally:
            await b.close()

    assert run(main) == [[2], [4]]
    assert len(threads) == 2 and all(t.startswith("batcher-pair-") for t in threads)


def test_fn_runs_off_the_event_loop_thread() -> None:
    seen: list[str] = []

    def fn(items: list[Any]) -> list[Any]:
        seen.append(threading.current_thread().name)
        return items

    async def main() -> None:
        b = Batcher(fn, name="t")
        try:
            await b.submit([1])
        finally:
            await b.close()

    run(main)
    assert seen == ["batcher-t-0"]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="max_batch_size"):
        Batcher(doubled, max_batch_size=0)


def test_a_big_request_is_chunked_and_other_keys_take_turns() -> None:
    """One key's 64-item request must not hold the model until it is done (issue 9, fault 3)."""
    batches: list[list[Any]] = []
    started = threading.Event()
    go = threading.Event()

    def fn(items: list[Any]) -> list[Any]:
        started.set()
        go.wait(10)  # the first chunk runs until the small request has queued
        batches.append(list(items))
        return doubled(items)

    async def main() -> tuple[list[Any], list[Any]]:
        b = Batcher(fn, chunk_items=4)
        try:
            big = asyncio.ensure_future(b.submit(list(range(64)), key="big"))
            await asyncio.to_thread(started.wait, 10)
            small = asyncio.ensure_future(b.submit([1000], key="small"))
            await asyncio.sleep(0.05)
            go.set()
            return await big, await small
        finally:
            await b.close()

    big, small = run(main)
    assert big == [2 * x for x in range(64)] and small == [2000]  # whole, in order
    assert all(len(batch) <= 4 for batch in batches) and len(batches) == 17
    # the small key ran right after the big key's first chunk, not after all 16
    assert batches.index([1000]) == 1
