"""Ops fixtures: a fixed-size machine for real jobs, and running one job to its end."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from aifab.jobs import get_job, submit
from aifab.jobs.detect import machine_resources
from aifab.jobs.worker import Worker, WorkerOptions


@pytest.fixture(autouse=True)
def machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A 4-CPU, 8 GiB, GPU-less machine, whatever runs the tests."""
    monkeypatch.setenv("AIFAB_WORKER_CPU", "4")
    monkeypatch.setenv("AIFAB_WORKER_MEMORY_MB", "8192")
    monkeypatch.setenv("AIFAB_WORKER_GPU", "0")
    machine_resources.cache_clear()
    yield
    machine_resources.cache_clear()


@pytest.fixture
def run_job() -> Iterator[Callable[..., dict[str, Any]]]:
    """``run_job(**spec_fields)``: submit a ``sleep`` job and step a real worker until it ends."""
    workers: list[Worker] = []

    def run(**fields: Any) -> dict[str, Any]:
        spec = {"name": "work", "run": {"recipe": "sleep", "config": {"seconds": 0.2}}, **fields}
        job = submit(spec)
        if not workers:
            workers.append(Worker(WorkerOptions(lease_s=5.0, poll_s=0.02)))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            workers[0].step()
            done = get_job(job["id"])
            if done["state"] in ("succeeded", "failed", "cancelled"):
                return done
            time.sleep(0.02)
        raise AssertionError(f"job {job['id']} did not finish")

    yield run
    stopped = threading.Event()
    stopped.set()
    for w in workers:
        w.run(stopped)
