"""Worker durability across processes: a SIGKILLed worker's job is recovered and runs once,
concurrent submitters lose nothing, and two workers on one DB never run a job twice."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from aifab.core.db import session_scope
from aifab.jobs import service
from aifab.jobs.detect import machine_resources
from aifab.jobs.executors.procs import group_members
from aifab.jobs.tables import AttemptRow, WorkerRow
from aifab.jobs.worker import Worker, WorkerOptions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux processes"),
]

FINAL = ("succeeded", "failed", "cancelled")
_WORKER = (
    "from aifab.jobs.worker import Worker, WorkerOptions; "
    "Worker(WorkerOptions(lease_s={lease}, poll_s=0.05, exit_when_idle_s={idle})).run()"
)
_SUBMIT = (
    "import sys; from aifab.jobs.service import submit; "
    "print('\\n'.join(submit({{'name': 'bulk-{n}-%d' % i, 'run': {{'command': ['true']}}, "
    "'resources': {{'cpu': 0.5, 'memory': 64}}}})['id'] for i in range(50)))"
)


@pytest.fixture(autouse=True)
def machine(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fixed 2-CPU machine, for this process and the workers it starts."""
    monkeypatch.setenv("AIFAB_WORKER_CPU", "2")
    monkeypatch.setenv("AIFAB_WORKER_MEMORY_MB", "4096")
    monkeypatch.setenv("AIFAB_WORKER_GPU", "0")
    machine_resources.cache_clear()
    yield
    machine_resources.cache_clear()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start Python snippets as processes (output to files in tmp_path); kill leftovers."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(code: str, name: str, stdout: Any = None) -> subprocess.Popen[bytes]:
        err = open(tmp_path / f"{name}.err", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=stdout, stderr=err)
        err.close()
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def live_members(pgids: list[int]) -> list[int]:
    """Pids of running (not zombie) processes whose process group is one of ``pgids``."""
    return [pid for pgid in pgids for pid in group_members(pgid)]


def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def first_handle(job_id: str) -> dict[str, Any]:
    with session_scope() as s:
        handle = s.scalar(
            select(AttemptRow.handle).where(AttemptRow.job_id == job_id, AttemptRow.number == 1)
        )
    return dict(handle or {})


def test_killed_worker_job_is_requeued_and_succeeds_once(
    tmp_path: Path, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    out = tmp_path / "out.txt"
    job = service.submit(
        {
            "name": "survivor",
            "run": {
                "command": [
                    "sh",
                    "-c",
                    f'sleep 60 & sleep 3; echo "$AIFAB_JOB_ATTEMPT" >> {out}; kill $!',
                ]
            },
        }
    )
    first = spawn(_WORKER.format(lease=1.5, idle=None), "worker1")
    handle = wait_for(lambda: first_handle(job["id"]), 60, "the first attempt to start")
    pgids = [int(r["pgid"]) for r in handle["replicas"]]
    leader = int(handle["replicas"][0]["pid"])
    wait_for(lambda: len(live_members(pgids)) >= 3, 10, "sh and both sleeps")
    first.send_signal(signal.SIGKILL)
    first.wait()
    # The replica's shell dies with its worker (PDEATHSIG); its children wait for a reaper.
    wait_for(lambda: leader not in live_members(pgids), 10, "the replica leader to die")
    assert live_members(pgids), "the background sleeps should outlive the dead worker"

    second = spawn(_WORKER.format(lease=5.0, idle=4.0), "worker2")
    assert second.wait(timeout=120) == 0, (tmp_path / "worker2.err").read_text()
    got = service.get_job(job["id"])
    assert got["state"] == "succeeded", got["reason"]
    lost, ok = got["attempts"]
    assert (lost["state"], ok["state"]) == ("lost", "succeeded")
    assert lost["reason"] == f"worker {lost['worker_id']} stopped heartbeating"
    assert ok["worker_id"] != lost["worker_id"]
    assert [e["kind"] for e in got["events"]].count("lost") == 1
    assert out.read_text() == "2\n"  # the killed attempt never got to write its line
    assert live_members(pgids) == []  # reaped by the second worker


def test_concurrent_submitters_then_one_worker_runs_all(
    tmp_path: Path, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    subs = [spawn(_SUBMIT.format(n=n), f"submit{n}", stdout=subprocess.PIPE) for n in range(4)]
    ids: list[str] = []
    for n, proc in enumerate(subs):
        stdout, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, (tmp_path / f"submit{n}.err").read_text()
        ids += stdout.decode().split()
    assert len(ids) == 200 and len(set(ids)) == 200
    stored = service.list_jobs(limit=1000)
    assert sorted(j["id"] for j in stored) == sorted(ids)
    assert {j["state"] for j in stored} == {"pending"}

    Worker(WorkerOptions(lease_s=10.0, poll_s=0.02, exit_when_idle_s=1.0)).run()
    jobs = service.list_jobs(limit=1000)
    assert {j["state"] for j in jobs} == {"succeeded"}
    with session_scope() as s:
        attempts = s.scalar(select(func.count()).select_from(AttemptRow))
    assert attempts == 200


def test_two_workers_never_run_a_job_twice(
    tmp_path: Path, spawn: Callable[..., subprocess.Popen[bytes]]
) -> None:
    workers = [spawn(_WORKER.format(lease=10.0, idle=None), f"worker{i}") for i in range(2)]

    def alive() -> bool:
        with session_scope() as s:
            count = s.scalar(select(func.count()).where(WorkerRow.state == "alive"))
        return count == 2

    wait_for(alive, 60, "both workers to register")
    ran = tmp_path / "ran.txt"
    ids = [
        service.submit(
            {
                "name": f"once-{i}",
                "run": {"command": ["sh", "-c", f'echo "$AIFAB_JOB_ID" >> {ran}; sleep 0.1']},
                "resources": {"cpu": 0.5, "memory": 64},
            }
        )["id"]
        for i in range(40)
    ]
    wait_for(
        lambda: all(service.get_job(i)["state"] in FINAL for i in ids), 180, "all jobs to finish"
    )
    for proc in workers:
        assert proc.poll() is None
        proc.terminate()
        proc.wait()
    runners = set()
    for job_id in ids:
        got = service.get_job(job_id)
        assert got["state"] == "succeeded", got["reason"]
        assert [a["state"] for a in got["attempts"]] == ["succeeded"]
        runners.add(got["attempts"][0]["worker_id"])
    assert sorted(ran.read_text().split()) == sorted(ids)  # each ran exactly once
    assert len(runners) == 2  # both workers took part
