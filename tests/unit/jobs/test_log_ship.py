"""Replica logs on an object store (moto's S3 server, the stand-in for S3/MinIO): a worker on
another node (its own AIFAB_HOME; the same DB and store) runs a job, and this workspace, whose
local directory never holds the log, follows it to the end through the chunks shipped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from aifab.core.storage import get_store
from aifab.jobs import get_job, log_path, submit, tail_log
from aifab.jobs.executors.ray_replica import ReplicaProcess
from aifab.jobs.log_ship import read_stored

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux processes")

CODE = (
    "import sys, time\n"
    "for i in range(10):\n"
    "    print(f'line {i}', flush=True); time.sleep(0.5)\n"
    "sys.stdout.write('no newline at the end')\n"
)
EXPECTED = "".join(f"line {i}\n" for i in range(10)) + "no newline at the end"


@pytest.fixture(autouse=True)
def _on_s3(s3_storage: str) -> str:
    return s3_storage


def test_a_log_written_on_another_node_is_followed_from_here_to_the_end(
    workspace: Path, tmp_path: Path
) -> None:
    job = submit(
        {
            "name": "t",
            "run": {"command": [sys.executable, "-c", CODE]},
            "resources": {"cpu": 1, "memory": "64Mi"},
        }
    )
    node = tmp_path / "node-a"
    env = {
        **os.environ,
        "AIFAB_HOME": str(node),
        "AIFAB_DB_URL": f"sqlite:///{workspace / 'aifab.db'}",
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "aifab", "worker", "--poll", "0.1", "--exit-when-idle", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        chunks: list[str] = []
        cursor = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            tail = tail_log(job["id"], cursor)
            if tail.text:
                chunks.append(tail.text)
            cursor = tail.cursor
            if tail.final:
                break
            time.sleep(0.1)
        assert worker.wait(timeout=120) == 0, worker.stderr.read().decode()[-1500:]  # type: ignore[union-attr]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert get_job(job["id"])["state"] == "succeeded"
    assert "".join(chunks) == EXPECTED
    assert len(chunks) > 1  # it came while the job ran, not in one piece at the end
    assert not log_path(job["id"], 1).exists()  # read from the store, not from this disk
    assert (node / log_path(job["id"], 1).relative_to(workspace)).read_text() == EXPECTED


def test_a_ray_replica_ships_its_log_from_its_node(tmp_path: Path) -> None:
    # The actor's body is plain Python: run here as a Ray node would run it.
    store = get_store()
    key = "logs/jobs/job_x/attempt-1/replica-0.log"
    replica = ReplicaProcess()
    home = tmp_path / "node" / "job_x" / "attempt-1" / "replica-0"
    local = home / key
    replica.start(
        [sys.executable, "-c", CODE], {}, None, str(local), (store.uri, key), node_home=str(home)
    )
    assert replica.wait()["exit_code"] == 0
    assert not (tmp_path / "node" / "job_x").exists()  # its node folder went with it
    data = EXPECTED.encode()
    assert read_stored(store, key, 0, 1 << 20) == (data, True)
    assert read_stored(store, key, 7, 10) == (data[7:17], False)  # by offset, across chunks
    assert read_stored(store, key, len(data), 10) == (b"", True)


def test_a_volcano_pods_recipe_output_reaches_the_store_and_its_own_stdout(
    workspace: Path, tmp_path: Path
) -> None:
    from aifab.jobs.executors.volcano import POD_HOME, VolcanoExecutor
    from aifab.jobs.launch import build_launch
    from aifab.jobs.spec import JobSpec

    spec = JobSpec.model_validate(
        {
            "name": "echo",
            "executor": "volcano",
            "replicas": 2,
            "run": {"recipe": "echo", "config": {"lines": ["one", "two"]}},
        }
    )
    manifest = VolcanoExecutor(dry_run=True).render_job(build_launch("job-9", 3, spec, ("n",) * 2))
    (c,) = manifest["spec"]["tasks"][0]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert env["AIFAB_JOB_LOG_KEY"] == "logs/jobs/job-9/attempt-3/replica-{rank}.log"
    assert env["AIFAB_HOME"] == POD_HOME
    # The pod's command, run here with the pod's environment (its own scratch home, rank 1).
    pod = {**os.environ, **env, "AIFAB_HOME": str(tmp_path / "pod"), "RANK": "1"}
    done = subprocess.run(
        [sys.executable, *c["command"][1:]], env=pod, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "one\ntwo\n"  # still the pod's own output (kubectl logs)
    key = "logs/jobs/job-9/attempt-3/replica-1.log"
    assert read_stored(get_store(), key, 0, 1 << 20) == (b"one\ntwo\n", True)
    # A recipe that fails: its traceback is in the shipped log too, and the pod fails.
    bad = {**pod, "RANK": "0", "AIFAB_JOB_CONFIG_JSON": '{"lines": 5}'}
    done = subprocess.run(
        [sys.executable, *c["command"][1:]], env=bad, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "TypeError" in done.stdout  # merged, as kubectl logs shows
    data, _ = read_stored(get_store(), "logs/jobs/job-9/attempt-3/replica-0.log", 0, 1 << 20)
    assert b"Traceback" in data and b"TypeError" in data


def test_a_ray_replica_that_cannot_reach_the_store_still_runs_and_says_why(
    tmp_path: Path,
) -> None:
    local = tmp_path / "node" / "replica-0.log"
    replica = ReplicaProcess()
    info = replica.start(
        [sys.executable, "-c", "print('hi')"],
        {},
        None,
        str(local),
        ("nope://b", "k"),
        node_home=str(local.parent),
    )
    assert "log_not_shipped" in info and "nope" in info["log_not_shipped"]
    assert replica.wait()["exit_code"] == 0
    assert local.read_text() == "hi\n"  # kept on its node


def test_job_logs_without_follow_prints_a_log_shipped_from_another_node(
    workspace: Path, tmp_path: Path, cli: Any
) -> None:
    """docs/team.md: a job's log is read "from any machine"; `aifab job logs JOB` (no -f) said
    "no log yet ... try -f" for a finished job whose replica ran on another node."""
    job = submit({"name": "t", "run": {"command": [sys.executable, "-c", "print('far away')"]}})
    env = {
        **os.environ,
        "AIFAB_HOME": str(tmp_path / "node-b"),
        "AIFAB_DB_URL": f"sqlite:///{workspace / 'aifab.db'}",
    }
    worker = subprocess.run(
        [sys.executable, "-m", "aifab", "worker", "--poll", "0.1", "--exit-when-idle", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert worker.returncode == 0, worker.stderr[-1500:]
    assert get_job(job["id"])["state"] == "succeeded"
    assert not log_path(job["id"], 1).exists()  # only on the store
    shown = cli("job", "logs", job["id"])
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout == "far away\n"
    first = cli("job", "logs", job["id"], "--replica", "0", "--attempt", "1")
    assert first.stdout == "far away\n"
