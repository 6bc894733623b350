"""The worker pool: a task past its time limit or over the memory limit loses its worker,
the pool serves the next task, and stopping it ends what runs (issue 31)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from aifab.core import workers
from aifab.core.errors import InvalidInputError


@pytest.fixture()
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AIFAB_WORKER_PROCESSES", "1")
    monkeypatch.setenv("AIFAB_WORKER_MEMORY_MB", "512")
    workers.start()
    yield
    workers.stop()


def test_inline_without_a_pool() -> None:
    assert not workers.is_running()
    assert workers.run(os.getpid, timeout_s=1) == os.getpid()


def test_a_task_past_its_limit_is_killed_and_its_worker_replaced(pool: None) -> None:
    first = workers.run(os.getpid, timeout_s=30)
    assert first != os.getpid()
    with pytest.raises(InvalidInputError, match=r"sleep stopped at its time limit \(0.5 s\)"):
        workers.run(time.sleep, 60, timeout_s=0.5, what="sleep")
    assert workers.run(os.getpid, timeout_s=30) not in {first, os.getpid()}


def test_a_task_over_the_memory_limit_fails_and_the_pool_goes_on(pool: None) -> None:
    with pytest.raises(InvalidInputError, match="over the worker memory limit"):
        workers.run(bytearray, 1 << 30, timeout_s=30, what="allocation")
    assert workers.run(sum, [1, 2, 3], timeout_s=30) == 6


def test_errors_of_the_task_come_back_as_they_are(pool: None) -> None:
    with pytest.raises(ValueError, match="invalid literal"):
        workers.run(int, "x", timeout_s=30)


def test_stopping_the_pool_answers_the_tasks_it_kills(pool: None) -> None:
    """pebble's stop left a running task's future unresolved: its caller waited forever."""
    import threading

    stopper = threading.Timer(1.0, workers.stop)
    stopper.start()
    with pytest.raises(workers.PoolStoppedError, match="shutting down"):
        workers.run(time.sleep, 120, timeout_s=180, what="sleep")
    stopper.join()


def test_after_a_final_stop_work_is_refused_not_run_inline(pool: None) -> None:
    """A SIGTERM's stop: a request arriving during the shutdown ran its work in the server."""
    workers.stop(final=True)
    with pytest.raises(workers.PoolStoppedError):
        workers.run(os.getpid, timeout_s=5)
