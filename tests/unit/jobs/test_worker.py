"""The worker loop against the real DB and the local executor: run, fail, retry, time out,
cancel, gang, distributed environment, preemption with resume, usage and logs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aifab.core.errors import InvalidInputError
from aifab.jobs import service
from aifab.jobs.launch import attempt_dir, checkpoint_dir

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux processes")

FINAL = ("succeeded", "failed", "cancelled")

Drive = Callable[..., None]
Members = Callable[[list[int]], list[int]]
HandleOf = Callable[[str, int], dict[str, Any]]


def sh(script: str, **spec: Any) -> dict[str, Any]:
    return service.submit({"name": "t", "run": {"command": ["sh", "-c", script]}, **spec})


def state(job_id: str) -> str:
    return str(service.get_job(job_id)["state"])


def done(*job_ids: str) -> Callable[[], bool]:
    return lambda: all(state(j) in FINAL for j in job_ids)


def pgids(handle: dict[str, Any]) -> list[int]:
    return [int(r["pgid"]) for r in handle["replicas"]]


def test_recipe_jobs_succeed(make_worker: Callable[..., Any], drive_until: Drive) -> None:
    noop = service.submit({"name": "noop", "run": {"recipe": "noop"}})
    nap = service.submit({"name": "nap", "run": {"recipe": "sleep", "config": {"seconds": 0.2}}})
    drive_until(make_worker(), done(noop["id"], nap["id"]))
    for job_id in (noop["id"], nap["id"]):
        job = service.get_job(job_id)
        assert job["state"] == "succeeded", job["reason"]
        assert [a["state"] for a in job["attempts"]] == ["succeeded"]
    assert service.get_job(nap["id"])["usage"]["wall_s"] >= 0.2


def test_command_job_records_usage_and_logs(
    make_worker: Callable[..., Any], drive_until: Drive
) -> None:
    job = sh('echo "out $RANK"; echo "err $RANK" >&2', replicas=2)
    drive_until(make_worker(), done(job["id"]))
    got = service.get_job(job["id"])
    assert got["state"] == "succeeded" and got["exit_code"] == 0
    [attempt] = got["attempts"]
    assert attempt["exit_codes"] == [0, 0]
    usage = attempt["usage"]
    assert usage["wall_s"] > 0 and usage["cpu_s"] >= 0 and usage["peak_rss_mb"] > 0
    assert len(usage["replicas"]) == 2
    assert got["usage"]["wall_s"] == pytest.approx(usage["wall_s"])
    for rank in (0, 1):
        log = attempt_dir(job["id"], 1) / f"replica-{rank}.log"
        assert sorted(log.read_text().splitlines()) == [f"err {rank}", f"out {rank}"]


def test_exit_code_fails_the_job(make_worker: Callable[..., Any], drive_until: Drive) -> None:
    job = sh("exit 3")
    drive_until(make_worker(), done(job["id"]))
    got = service.get_job(job["id"])
    assert (got["state"], got["exit_code"], got["reason"]) == ("failed", 3, "exit code 3")
    assert [a["state"] for a in got["attempts"]] == ["failed"]


def test_max_retries_reruns_then_fails(
    make_worker: Callable[..., Any], drive_until: Drive, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    job = sh(f'echo "$AIFAB_JOB_ATTEMPT" >> {runs}; exit 4', max_retries=2)
    drive_until(make_worker(), done(job["id"]))
    got = service.get_job(job["id"])
    assert (got["state"], got["exit_code"]) == ("failed", 4)
    assert [a["state"] for a in got["attempts"]] == ["failed"] * 3
    assert runs.read_text().split() == ["1", "2", "3"]
    assert got["reason"] == "exit code 4"


def test_retry_succeeds_on_a_later_attempt(
    make_worker: Callable[..., Any], drive_until: Drive
) -> None:
    job = sh('[ "$AIFAB_JOB_ATTEMPT" -ge 2 ]', max_retries=3)
    drive_until(make_worker(), done(job["id"]))
    got = service.get_job(job["id"])
    assert got["state"] == "succeeded"
    assert [a["state"] for a in got["attempts"]] == ["failed", "succeeded"]


def test_timeout_kills_and_records(
    make_worker: Callable[..., Any], drive_until: Drive, handle_of: HandleOf, group_members: Members
) -> None:
    job = sh("sleep 30 & sleep 30", timeout=0.5)
    drive_until(make_worker(), done(job["id"]))
    got = service.get_job(job["id"])
    assert got["state"] == "failed"
    assert got["reason"] == "timed out after 0.5 s"
    assert [a["state"] for a in got["attempts"]] == ["timeout"]
    assert group_members(pgids(handle_of(job["id"], 1))) == []


def test_cancel_pending_job(make_worker: Callable[..., Any]) -> None:
    job = sh("exit 0")
    assert service.cancel(job["id"])["state"] == "cancelled"
    worker = make_worker()
    worker.step()
    got = service.get_job(job["id"])
    assert got["state"] == "cancelled" and got["attempts"] == []


def test_cancel_running_gang_kills_grandchildren(
    make_worker: Callable[..., Any], drive_until: Drive, handle_of: HandleOf, group_members: Members
) -> None:
    job = sh("sleep 30 & sleep 30", replicas=2)
    worker = make_worker()
    # sh plus two sleeps in each replica's group
    drive_until(
        worker,
        lambda: len(group_members(pgids(handle_of(job["id"], 1) or {"replicas": []}))) == 6,
    )
    assert service.cancel(job["id"])["stop_request"] == "cancel"
    drive_until(worker, done(job["id"]))
    got = service.get_job(job["id"])
    assert got["state"] == "cancelled"
    assert [a["state"] for a in got["attempts"]] == ["cancelled"]
    assert group_members(pgids(handle_of(job["id"], 1))) == []


def test_gang_waits_for_room_while_smaller_gang_starts_together(
    machine: Callable[..., None],
    make_worker: Callable[..., Any],
    drive_until: Drive,
    handle_of: HandleOf,
    group_members: Members,
) -> None:
    machine(cpu=2)
    with pytest.raises(InvalidInputError, match="cpu 3 > 2"):
        sh("true", replicas=2, resources={"cpu": 1.5})
    machine(cpu=4)  # submitted where 3 CPUs exist, run by a 2-CPU worker
    big = sh("true", replicas=2, resources={"cpu": 1.5})
    machine(cpu=2)
    small = sh("sleep 1", replicas=2, resources={"cpu": 1})
    worker = make_worker()
    drive_until(worker, lambda: state(small["id"]) == "running")
    handle = handle_of(small["id"], 1)
    assert len(handle["replicas"]) == 2
    assert all(group_members([g]) for g in pgids(handle))  # both replicas run at once
    reason = service.get_job(big["id"])["reason"]
    assert reason.startswith("waiting for resources: 2 replica(s) of cpu 1.5")
    drive_until(worker, done(small["id"]))
    assert state(small["id"]) == "succeeded"
    got = service.get_job(big["id"])
    assert got["state"] == "pending" and "free in total: cpu 2" in got["reason"]


def test_replicas_get_distributed_environment(
    make_worker: Callable[..., Any], drive_until: Drive
) -> None:
    script = (
        'echo "$RANK $WORLD_SIZE $MASTER_ADDR $MASTER_PORT $LOCAL_RANK $OMP_NUM_THREADS '
        '$AIFAB_JOB_ID"'
    )
    job = sh(script, replicas=2, resources={"cpu": 2})
    drive_until(make_worker(), done(job["id"]))
    assert state(job["id"]) == "succeeded"
    lines = [
        (attempt_dir(job["id"], 1) / f"replica-{rank}.log").read_text().split() for rank in (0, 1)
    ]
    assert [line[0] for line in lines] == ["0", "1"]
    assert [line[4] for line in lines] == ["0", "1"]
    for line in lines:
        assert line[1] == "2" and line[2] == "127.0.0.1" and line[5] == "2"
        assert line[6] == job["id"]
    assert lines[0][3] == lines[1][3] and int(lines[0][3]) > 0


def test_preemption_requeues_and_resumes_from_checkpoint(
    machine: Callable[..., None], make_worker: Callable[..., Any], drive_until: Drive
) -> None:
    machine(cpu=2)
    # Each run appends its attempt to a file in the checkpoint dir; the second run finishes.
    low = sh(
        'echo "$AIFAB_JOB_ATTEMPT" >> "$AIFAB_CHECKPOINT_DIR/progress"; '
        '[ "$(wc -l < "$AIFAB_CHECKPOINT_DIR/progress")" -ge 2 ] && exit 0; sleep 30',
        resources={"cpu": 2},
    )
    progress = checkpoint_dir(low["id"]) / "progress"
    worker = make_worker()
    drive_until(worker, lambda: progress.exists() and progress.read_text() == "1\n")
    high = sh("sleep 0.3", resources={"cpu": 2}, priority=10)
    worker.step()  # this cycle asks the low job's worker to stop it
    victim = service.get_job(low["id"])
    assert (victim["state"], victim["stop_request"]) == ("running", "preempt")
    assert victim["reason"] == f"preempted by job {high['id']} (priority 10)"
    assert service.get_job(high["id"])["reason"] == "waiting for 1 preempted job(s) to stop"
    drive_until(worker, lambda: state(low["id"]) == "pending")
    drive_until(worker, done(low["id"], high["id"]))
    got_low, got_high = service.get_job(low["id"]), service.get_job(high["id"])
    assert (got_low["state"], got_high["state"]) == ("succeeded", "succeeded")
    first, second = got_low["attempts"]
    assert first["state"] == "preempted"
    assert first["reason"] == f"preempted by job {high['id']} (priority 10)"
    assert second["state"] == "succeeded"
    assert got_high["attempts"][0]["finished_at"] <= second["started_at"]
    assert progress.read_text().split() == ["1", "2"]  # resumed with the same checkpoint dir
    assert got_low["usage"]["wall_s"] > 0


def test_a_job_whose_executor_no_worker_runs_says_which_worker_to_start(
    make_worker: Callable[..., Any], drive_until: Drive, cli: Any
) -> None:
    """docs/team.md: a `--executor ray` job waited under `aifab worker` (executor local) with
    no word why; the local worker runs its own jobs and names the worker the other one needs."""
    far = service.submit({"name": "far", "executor": "ray", "run": {"command": ["true"]}})
    near = sh("true")
    drive_until(make_worker(), done(near["id"]))
    job = service.get_job(far["id"])
    assert job["state"] == "pending"
    assert "aifab worker --executor ray" in job["reason"], job["reason"]
    shown = cli("job", "show", far["id"])
    assert "no running worker serves executor 'ray'" in " ".join(shown.stdout.split())


def test_submitting_for_an_executor_no_worker_runs_says_so(cli: Any, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: far\nrun: {command: ['true']}\n")
    out = cli("job", "submit", spec, "--executor", "ray")
    assert out.exit_code == 0, out.stderr
    assert "start one with 'aifab worker --executor ray'" in out.stderr


def test_a_starting_worker_counts_the_jobs_waiting_for_another_executor(cli: Any) -> None:
    service.submit({"name": "far", "executor": "ray", "run": {"command": ["true"]}})
    out = cli("worker", "--exit-when-idle", "0.2", "--poll", "0.05")
    assert out.exit_code == 0, out.stderr
    assert "1 pending job(s) are for executor ray" in out.stdout
    assert "'aifab worker --executor ray'" in out.stdout
