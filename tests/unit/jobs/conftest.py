"""Job test fixtures: a fixed-size machine, workers driven step by step, process-group checks."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import select

from aifab.core.db import session_scope
from aifab.jobs.detect import machine_resources
from aifab.jobs.executors import procs
from aifab.jobs.tables import AttemptRow
from aifab.jobs.worker import Worker, WorkerOptions

FINAL = ("succeeded", "failed", "cancelled")


@pytest.fixture(autouse=True)
def machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """A 4-CPU, 8 GiB, GPU-less machine by default; call it to resize (e.g. ``machine(cpu=2)``)."""

    def resize(cpu: float = 4, memory_mb: float = 8192, gpu: int = 0) -> None:
        monkeypatch.setenv("AIFAB_WORKER_CPU", str(cpu))
        monkeypatch.setenv("AIFAB_WORKER_MEMORY_MB", str(memory_mb))
        monkeypatch.setenv("AIFAB_WORKER_GPU", str(gpu))
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        machine_resources.cache_clear()

    resize()
    yield resize
    machine_resources.cache_clear()


def live_members(pgids: list[int]) -> list[int]:
    """Pids of running (not zombie) processes whose process group is one of ``pgids``."""
    return [pid for pgid in pgids for pid in procs.group_members(pgid)]


@pytest.fixture
def group_members() -> Callable[[list[int]], list[int]]:
    """``group_members(pgids)`` -> live pids in those process groups (read from /proc)."""
    if not os.path.isdir("/proc"):
        pytest.skip("needs /proc")
    return live_members


@pytest.fixture
def make_worker() -> Iterator[Callable[..., Worker]]:
    """Build workers with test-sized timings; each is shut down (attempts stopped) at the end."""
    made: list[Worker] = []

    def make(**options: Any) -> Worker:
        opts = {"lease_s": 5.0, "poll_s": 0.02, **options}
        w = Worker(WorkerOptions(**opts))
        made.append(w)
        return w

    yield make
    stopped = threading.Event()
    stopped.set()
    for w in made:
        w.run(stopped)  # with the event set, run() only stops what is running and retires


def drive(workers: Worker | list[Worker], until: Callable[[], bool], timeout: float = 30.0) -> None:
    """Step the workers until ``until()`` holds; fail after ``timeout`` seconds."""
    ws = workers if isinstance(workers, list) else [workers]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for w in ws:
            w.step()
        if until():
            return
        time.sleep(0.02)
    raise AssertionError(f"condition not reached within {timeout} s")


@pytest.fixture
def drive_until() -> Callable[..., None]:
    """``drive_until(worker, predicate, timeout=30)``: step until the predicate holds."""
    return drive


def attempt_handle(job_id: str, number: int) -> dict[str, Any]:
    """The executor handle stored for one attempt."""
    with session_scope() as s:
        handle = s.scalar(
            select(AttemptRow.handle).where(
                AttemptRow.job_id == job_id, AttemptRow.number == number
            )
        )
    return dict(handle or {})


@pytest.fixture
def handle_of() -> Callable[[str, int], dict[str, Any]]:
    """``handle_of(job_id, attempt)`` -> the attempt's stored executor handle."""
    return attempt_handle
