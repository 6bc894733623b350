"""Schedules: cron arithmetic (pure), create/pause/resume/delete, due runs, leases, missed runs."""

from __future__ import annotations

import datetime as dt
import threading
import time
from pathlib import Path

import pytest

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.ops.cron import advance, check_cron, next_after
from aifab.ops.schedules import (
    create_schedule,
    list_schedules,
    run_due,
    schedule_runs,
    set_paused,
)


def _ts(*args: int) -> float:
    return dt.datetime(*args, tzinfo=dt.UTC).timestamp()


def test_cron_next_and_missed_runs_collapse() -> None:
    assert next_after("0 * * * *", _ts(2026, 1, 1, 10, 15)) == _ts(2026, 1, 1, 11, 0)
    # Down from 10:00 to 15:30: one run now, four skipped, next at 16:00.
    nxt, missed = advance("0 * * * *", _ts(2026, 1, 1, 11, 0), _ts(2026, 1, 1, 15, 30))
    assert (nxt, missed) == (_ts(2026, 1, 1, 16, 0), 4)
    assert advance("0 * * * *", _ts(2026, 1, 1, 11, 0), _ts(2026, 1, 1, 11, 0, 5))[1] == 0
    with pytest.raises(InvalidInputError, match="5 fields"):
        check_cron("every hour")
    with pytest.raises(InvalidInputError, match="5 fields"):
        check_cron("61 * * * *")


def _job_file(tmp_path: Path) -> Path:
    p = tmp_path / "job.yaml"
    p.write_text("name: nightly\nrun: {command: ['python', '-c', 'print(1)']}\n")
    return p


def test_due_schedule_runs_once_after_downtime(tmp_path: Path) -> None:
    from aifab.jobs import list_jobs

    create_schedule("nightly", "0 3 * * *", "job", str(_job_file(tmp_path)))
    due = list_schedules()[0]["next_at"]
    assert run_due("w1", now=due - 1) == []  # not due yet
    later = due + 5 * 86400 + 60  # the worker was down for five days
    out = run_due("w1", now=later)
    assert len(out) == 1 and out[0]["status"] == "succeeded" and out[0]["missed"] == 5
    assert len(list_jobs()) == 1  # one job, not six
    assert list_schedules()[0]["next_at"] > later
    assert run_due("w1", now=later + 1) == []
    runs = schedule_runs("nightly")
    assert runs[0]["status"] == "succeeded" and runs[0]["detail"]["result"]["job"]


def test_a_held_lease_stops_a_second_runner(tmp_path: Path) -> None:
    from aifab.ops import schedules

    create_schedule("s", "* * * * *", "job", str(_job_file(tmp_path)))
    due = list_schedules()[0]["next_at"]
    assert schedules._claim("s", "worker-a", due)  # worker a is running it
    assert run_due("worker-b", now=due + 1) == []  # b sees it due but cannot claim it
    assert schedule_runs("s") == []
    # a's lease expires (a died): b may run it
    assert len(run_due("worker-b", now=due + schedules.LEASE_S + 1)) == 1


def test_concurrent_runners_run_a_schedule_once(tmp_path: Path) -> None:
    create_schedule("c", "* * * * *", "job", str(_job_file(tmp_path)))
    now = list_schedules()[0]["next_at"] + 1
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(len(run_due(f"w{i}", now=now))))
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(results) == 1 and len(schedule_runs("c")) == 1


def test_pause_resume_failure_and_bad_input(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="no monitor 'm'"):
        create_schedule("p", "* * * * *", "monitor", "m")
    with pytest.raises(InvalidInputError, match="no such file"):
        create_schedule("p", "* * * * *", "pipeline", str(tmp_path / "nope.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nrun: {recipe: nope}\n")
    create_schedule("p", "* * * * *", "job", str(bad))
    set_paused("p", True)
    assert run_due("w", now=time.time() + 3600) == []
    set_paused("p", False)
    out = run_due("w", now=time.time() + 3600)
    assert out[0]["status"] == "failed" and "error" in out[0]  # recorded, never raised


def test_cli(cli, tmp_path: Path) -> None:
    job = _job_file(tmp_path)
    r = cli("schedule", "create", "hourly", "--cron", "0 * * * *", "--job", job)
    assert r.exit_code == 0 and "hourly" in r.stdout
    r = cli("schedule", "create", "x", "--cron", "0 * * * *", "--job", job, "--monitor", "m")
    assert r.exit_code != 0 and "exactly one of" in r.stderr
    assert cli("schedule", "pause", "hourly").exit_code == 0
    assert "paused" in cli("schedule", "list").stdout
    assert "next run" in cli("schedule", "resume", "hourly").stdout
    assert cli("schedule", "runs", "hourly").exit_code == 0
    assert cli("schedule", "delete", "hourly").exit_code == 0
    r = cli("schedule", "runs", "hourly")
    assert r.exit_code != 0 and "no schedule 'hourly'" in r.stderr


def test_the_worker_loop_runs_due_schedules(tmp_path: Path) -> None:
    from aifab.core.db import session_scope
    from aifab.jobs.worker import Worker, WorkerOptions
    from aifab.ops.tables import ScheduleRow

    create_schedule("w", "0 0 1 1 *", "job", str(_job_file(tmp_path)))
    with session_scope() as s:
        row = s.get(ScheduleRow, "w")
        assert row is not None
        row.next_at = time.time() - 1  # came due while no worker ran
    stop = threading.Event()
    worker = Worker(WorkerOptions(poll_s=0.05))
    t = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 20
        while not schedule_runs("w") or schedule_runs("w")[0]["status"] == "running":
            assert time.monotonic() < deadline, "the worker did not run the due schedule"
            time.sleep(0.1)
    finally:
        stop.set()
        t.join(timeout=30)
    assert schedule_runs("w")[0]["status"] == "succeeded"


def test_a_policy_schedule_evaluates_the_policy() -> None:
    from aifab.ops.policy.service import create_policy, policy_history

    create_policy(
        "loop",
        {
            "deployment": "d",
            "model": "m",
            "trigger": {"monitor": "mon"},
            "retrain": {"config": {"dataset": "x"}},
        },
    )
    create_schedule("eval", "*/5 * * * *", "policy", "loop")
    out = run_due("w", now=list_schedules()[0]["next_at"] + 1)
    assert out[0]["status"] == "succeeded" and out[0]["result"]["outcome"] == "skipped"
    assert policy_history("loop")[0]["record"]["why"].startswith("no firing alert")
    with pytest.raises(NotFoundError, match="no policy 'nope'"):
        create_schedule("bad", "* * * * *", "policy", "nope")
