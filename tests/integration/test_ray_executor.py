"""The Ray executor end to end on one small local Ray instance (shared: Ray starts slowly)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from aifab.core.db import session_scope
from aifab.jobs.executors.ray import RayExecutor
from aifab.jobs.launch import attempt_dir, build_launch
from aifab.jobs.logs import tail_log
from aifab.jobs.service import cancel, get_job, submit
from aifab.jobs.spec import JobSpec
from aifab.jobs.tables import AttemptRow
from aifab.jobs.worker import Worker, WorkerOptions

pytestmark = pytest.mark.integration

FINAL = ("succeeded", "failed", "cancelled")


@pytest.fixture(scope="module")
def ray_local(s3_server: Any) -> Iterator[Any]:
    """A local Ray whose workers have the S3 stand-in's credentials (as a team's nodes do)."""
    ray = pytest.importorskip("ray")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "disabled")
        for key, value in s3_server.env.items():
            mp.setenv(key, value)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace="aifab")
        yield ray
        ray.shutdown()


@pytest.fixture
def worker(ray_local: Any) -> Iterator[Worker]:
    w = Worker(WorkerOptions(executor="ray", lease_s=30.0, poll_s=0.05))
    yield w
    stop = threading.Event()
    stop.set()
    w.run(stop)  # stops whatever still runs and retires the worker


def drive(w: Worker, until: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        w.step()
        if until():
            return
        time.sleep(0.05)
    raise AssertionError(f"condition not reached within {timeout} s")


def handle_of(job_id: str, number: int) -> dict[str, Any]:
    with session_scope() as s:
        return dict(
            s.scalar(
                select(AttemptRow.handle).where(
                    AttemptRow.job_id == job_id, AttemptRow.number == number
                )
            )
            or {}
        )


def state(job_id: str) -> str:
    return str(get_job(job_id)["state"])


def live_in_group(pgid: int) -> list[int]:
    """Pids of running (not zombie) processes in process group ``pgid``."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(name))
    return found


def eventually(check: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def gone(ray: Any, actor_names: list[str], pg_hex: str, timeout: float = 15.0) -> bool:
    """Whether every named actor is dead and the placement group removed (both are async)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for name in actor_names:
            try:
                ray.get_actor(name, namespace="aifab")
                alive.append(name)
            except ValueError:
                pass
        pg_state = ray.util.placement_group_table().get(pg_hex, {}).get("state")
        if not alive and pg_state in (None, "REMOVED"):
            return True
        time.sleep(0.2)
    return False


def sleeper(tmp_path: Path) -> list[str]:
    """A replica that records its process group and leaves a child behind in it."""
    return ["sh", "-c", f"echo $$ > {tmp_path}/pgid-$RANK; sleep 60 & sleep 60"]


def test_two_replicas_run_while_a_gang_too_big_for_ray_waits(
    ray_local: Any, worker: Worker
) -> None:
    too_big = submit(
        {
            "name": "too-big",
            "executor": "ray",
            "replicas": 2,
            "resources": {"cpu": 2},
            "run": {"command": ["true"]},
        }
    )
    code = (
        "import os; e = os.environ; "
        "print('rank', e['RANK'], 'of', e['WORLD_SIZE'], 'local', e['LOCAL_RANK'], "
        "'master', e['MASTER_ADDR'], e['MASTER_PORT'])"
    )
    job = submit(
        {
            "name": "pair",
            "executor": "ray",
            "replicas": 2,
            "resources": {"cpu": 1, "memory": "128Mi"},
            "run": {"command": [sys.executable, "-c", code]},
        }
    )
    drive(worker, lambda: state(job["id"]) in FINAL)
    info = get_job(job["id"])
    assert info["state"] == "succeeded", info["events"]
    (att,) = info["attempts"]
    assert att["exit_codes"] == [0, 0]
    assert [r["rank"] for r in att["usage"]["replicas"]] == [0, 1]
    assert all(r["wall_s"] > 0 and r["cpu_s"] > 0 for r in att["usage"]["replicas"])
    assert att["usage"]["cpu_s"] == pytest.approx(sum(r["cpu_s"] for r in att["usage"]["replicas"]))
    assert att["usage"]["gpu_s"] == 0
    handle = handle_of(job["id"], 1)
    ip = handle["master_addr"]
    for rank in (0, 1):
        text = (attempt_dir(job["id"], 1) / f"replica-{rank}.log").read_text()
        assert f"rank {rank} of 2 local {rank} master {ip} " in text
    assert gone(ray_local, handle["actors"], handle["placement_group"])
    waiting = get_job(too_big["id"])
    assert waiting["state"] == "pending"
    assert "waiting for resources: 2 replica(s) of cpu 2" in waiting["reason"]


def test_cancel_and_a_failed_gang_stop_every_replica_process(
    ray_local: Any, worker: Worker, tmp_path: Path
) -> None:
    cancelled, gang = tmp_path / "cancelled", tmp_path / "gang"
    cancelled.mkdir()
    gang.mkdir()
    small = {"executor": "ray", "resources": {"cpu": 0.5, "memory": "64Mi"}}
    sleepy = submit({**small, "name": "sleepy", "run": {"command": sleeper(cancelled)}})
    # Rank 1 fails while rank 0 would sleep on: the executor stops rank 0 too.
    failing = f'if [ "$RANK" = 1 ]; then sleep 1; exit 3; fi; {sleeper(gang)[2]}'
    doomed = submit(
        {**small, "name": "doomed", "replicas": 2, "run": {"command": ["sh", "-c", failing]}}
    )
    lost = submit(
        {
            **small,
            "name": "lost",
            "workdir": str(tmp_path / "nowhere"),
            "run": {"command": ["true"]},
        }
    )
    started = cancelled / "pgid-0", gang / "pgid-0"
    drive(worker, lambda: all(f.exists() and f.read_text().strip() for f in started))
    pgids = [int(f.read_text()) for f in started]
    assert len(live_in_group(pgids[0])) == 3  # sh and its two sleeps
    cancel(sleepy["id"])
    drive(worker, lambda: state(sleepy["id"]) in FINAL and state(doomed["id"]) in FINAL)
    assert state(sleepy["id"]) == "cancelled"
    info = get_job(doomed["id"])
    assert info["state"] == "failed"
    assert info["attempts"][0]["exit_codes"] == [None, 3]  # rank 0 was stopped, not failed
    drive(worker, lambda: state(lost["id"]) in FINAL)
    reason = get_job(lost["id"])["reason"]
    assert reason.startswith("launch failed: [Errno 2]") and "nowhere" in reason
    assert eventually(lambda: not any(live_in_group(p) for p in pgids), timeout=5)
    for job in (sleepy, doomed):
        handle = handle_of(job["id"], 1)
        assert gone(ray_local, handle["actors"], handle["placement_group"])


def test_reap_kills_replicas_orphaned_by_a_dead_actor(ray_local: Any, tmp_path: Path) -> None:
    spec = JobSpec.model_validate(
        {"name": "orphan", "executor": "ray", "run": {"command": sleeper(tmp_path)}}
    )
    owner = RayExecutor()
    node = owner.nodes()[0].name
    handle = owner.launch(build_launch("job_test_reap0001", 1, spec, (node,)))
    pid_file = tmp_path / "pgid-0"
    assert eventually(lambda: pid_file.exists() and pid_file.read_text().strip() != "")
    pgid = int(pid_file.read_text())
    assert handle["replicas"][0]["pgid"] == pgid
    # The actor dies without stopping its replica (as when its worker dies): the children of
    # the replica outlive it until another worker reaps the attempt from its stored handle.
    ray_local.kill(ray_local.get_actor(handle["actors"][0], namespace="aifab"))
    assert eventually(lambda: 0 < len(live_in_group(pgid)) < 3)
    RayExecutor().reap(handle)
    assert eventually(lambda: live_in_group(pgid) == [])
    assert gone(ray_local, handle["actors"], handle["placement_group"])


def test_with_an_object_store_a_replica_uses_its_own_workspace(
    ray_local: Any, s3_storage: str, worker: Worker, workspace: Path, tmp_path: Path
) -> None:
    """The replica sees none of the submitter's paths: its AIFAB_HOME is node-local, its
    working directory the Ray worker's (not the submitter's), and the store (moto's S3
    stand-in) is named."""
    mine = tmp_path / "submitter-dir"
    mine.mkdir()
    code = (
        "import os; e = os.environ; "
        "print('home', e['AIFAB_HOME'], 'store', e['AIFAB_STORAGE_URI'], 'cwd', os.getcwd(), "
        "'ckpt', e['AIFAB_CHECKPOINT_DIR'])"
    )
    job = submit(
        {"name": "far", "executor": "ray", "run": {"command": [sys.executable, "-c", code]}}
    )
    drive(worker, lambda: state(job["id"]) in FINAL)
    info = get_job(job["id"])
    assert info["state"] == "succeeded", info["events"]
    # Its log was written on its node and shipped to the store; this machine reads it there.
    assert not (attempt_dir(job["id"], 1) / "replica-0.log").exists()
    log = tail_log(job["id"])
    assert log.final
    text = log.text
    home = f"/tmp/aifab-ray/{job['id']}/attempt-1/replica-0"
    assert f"home {home} store {s3_storage} cwd " in text
    assert f"ckpt {home}/artifacts/jobs/{job['id']}/checkpoints" in text
    assert str(workspace.resolve()) not in text and str(mine) not in text
    # The node's folder (log, lake cache) went with the attempt: its log is on the store.
    assert eventually(lambda: not Path(f"/tmp/aifab-ray/{job['id']}").exists())


def test_a_replica_joins_the_cluster_it_runs_on(ray_local: Any, worker: Worker) -> None:
    """A job that submits Ray jobs itself (a pipeline whose train step says `executor: ray`)
    must reach this cluster, not start a Ray instance of its own on the node."""
    code = "import os; print('ray', os.environ.get('RAY_ADDRESS'))"
    job = submit(
        {"name": "nested", "executor": "ray", "run": {"command": [sys.executable, "-c", code]}}
    )
    drive(worker, lambda: state(job["id"]) in FINAL)
    assert state(job["id"]) == "succeeded"
    address = ray_local.get_runtime_context().gcs_address
    assert f"ray {address}\n" in tail_log(job["id"]).text


def test_a_local_ray_instance_starts_without_a_warning_a_user_cannot_act_on() -> None:
    """Ray warned about token authentication on every local start when RAY_AUTH_MODE was unset."""
    import subprocess
    import sys

    code = (
        "import ray\n"
        "from aifab.jobs.executors.ray import RayExecutor\n"
        "RayExecutor(num_cpus=1)._ray()\n"
        "ray.shutdown()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Token authentication" not in run.stderr
