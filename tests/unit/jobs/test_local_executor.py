"""LocalExecutor: process groups, logs, GPU allotment, usage, gang failure, stop and reap."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from aifab.jobs.detect import machine_resources
from aifab.jobs.executors import get_executor
from aifab.jobs.executors.base import AttemptStatus, Launch
from aifab.jobs.executors.local import LocalExecutor
from aifab.jobs.launch import build_launch
from aifab.jobs.spec import JobSpec

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux processes")

_counter = iter(range(1, 1_000_000))


def make_launch(command: str, replicas: int = 1, gpu: int = 0) -> Launch:
    spec = JobSpec.model_validate(
        {
            "name": "t",
            "run": {"command": ["sh", "-c", command]},
            "replicas": replicas,
            "resources": {"cpu": 1, "gpu": gpu},
        }
    )
    return build_launch(f"job-{next(_counter)}", 1, spec, ("here",) * replicas)


def wait_done(ex: LocalExecutor, handle: dict[str, Any], timeout: float = 20.0) -> AttemptStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = ex.poll(handle)
        if status.done:
            return status
        time.sleep(0.02)
    raise AssertionError("attempt did not finish")


def pgids(handle: dict[str, Any]) -> list[int]:
    return [int(r["pgid"]) for r in handle["replicas"]]


def test_registered_and_offers_this_machine() -> None:
    ex = get_executor("local")
    assert isinstance(ex, LocalExecutor)
    assert (ex.name, ex.self_scheduling) == ("local", False)
    [node] = ex.nodes()
    assert node.name == socket.gethostname()
    assert node.capacity == machine_resources()
    assert node.capacity.cpu == 4


def test_replicas_run_with_env_logs_and_usage() -> None:
    ex = LocalExecutor()
    launch = make_launch('echo "rank=$RANK world=$WORLD_SIZE cuda=[$CUDA_VISIBLE_DEVICES]"', 2)
    handle = ex.launch(launch)
    assert handle["host"] == socket.gethostname()
    assert handle["gpus"] == []
    for r in handle["replicas"]:
        assert r["pid"] == r["pgid"] > 0
    status = wait_done(ex, handle)
    assert status.succeeded and status.exit_codes == [0, 0]
    for rank, rl in enumerate(launch.replicas):
        assert handle["replicas"][rank]["log"] == str(rl.log_path)
        assert rl.log_path.read_text() == f"rank={rank} world=2 cuda=[]\n"
    usage = status.usage
    assert usage["wall_s"] > 0 and usage["cpu_s"] >= 0 and usage["peak_rss_mb"] > 0
    assert usage["gpu_s"] == 0
    assert [r["rank"] for r in usage["replicas"]] == [0, 1]
    assert usage["wall_s"] == pytest.approx(sum(r["wall_s"] for r in usage["replicas"]))
    assert ex.poll(handle) == status  # a finished attempt keeps answering the same


def test_replica_runs_in_its_own_session(group_members: Callable[[list[int]], list[int]]) -> None:
    ex = LocalExecutor()
    handle = ex.launch(make_launch("sleep 30"))
    pid = handle["replicas"][0]["pid"]
    assert os.getpgid(pid) == pid and os.getsid(pid) == pid
    assert os.getpgid(pid) != os.getpgid(0)
    ex.stop(handle, grace_s=2)
    assert group_members(pgids(handle)) == []


def test_gpus_are_allotted_per_replica_and_released(machine: Callable[..., None]) -> None:
    machine(gpu=2)  # accounting only: the replicas just print what they were given
    ex = LocalExecutor()
    launch = make_launch('echo "[$CUDA_VISIBLE_DEVICES]"; sleep 0.3', replicas=2, gpu=1)
    handle = ex.launch(launch)
    assert handle["gpus"] == ["0", "1"]
    with pytest.raises(RuntimeError, match="needs 1 GPU"):
        ex.launch(make_launch("true", gpu=1))
    status = wait_done(ex, handle)
    assert [rl.log_path.read_text() for rl in launch.replicas] == ["[0]\n", "[1]\n"]
    assert status.usage["gpu_s"] == pytest.approx(status.usage["wall_s"])
    again = ex.launch(make_launch("true", replicas=2, gpu=1))
    assert again["gpus"] == ["0", "1"]
    assert wait_done(ex, again).succeeded


def test_failed_launch_releases_gpus(machine: Callable[..., None]) -> None:
    machine(gpu=1)
    ex = LocalExecutor()
    spec = JobSpec.model_validate(
        {"name": "t", "run": {"command": ["/no/such/binary"]}, "resources": {"gpu": 1}}
    )
    with pytest.raises(FileNotFoundError):
        ex.launch(build_launch("job-missing", 1, spec, ("here",)))
    handle = ex.launch(make_launch("true", gpu=1))
    assert handle["gpus"] == ["0"]
    assert wait_done(ex, handle).succeeded


def test_exit_code_and_leftover_children_are_killed(
    group_members: Callable[[list[int]], list[int]],
) -> None:
    ex = LocalExecutor()
    handle = ex.launch(make_launch("sleep 30 & exit 7"))
    status = wait_done(ex, handle)
    assert status.done and not status.succeeded and status.exit_codes == [7]
    assert group_members(pgids(handle)) == []  # the background sleep did not outlive it


def test_gang_fails_together(group_members: Callable[[list[int]], list[int]]) -> None:
    ex = LocalExecutor()
    handle = ex.launch(make_launch('if [ "$RANK" = 1 ]; then exit 3; fi; sleep 30', 2))
    status = wait_done(ex, handle, timeout=10)
    # rank 0 was stopped because rank 1 failed: only the real failure carries a code
    assert status.exit_codes == [None, 3]
    assert status.usage["replicas"][0]["exit_code"] == -signal.SIGTERM
    assert group_members(pgids(handle)) == []


def test_stop_kills_whole_groups(group_members: Callable[[list[int]], list[int]]) -> None:
    ex = LocalExecutor()
    handle = ex.launch(make_launch("sleep 30 & sleep 30", 2))
    deadline = time.monotonic() + 10
    while len(group_members(pgids(handle))) < 6 and time.monotonic() < deadline:
        time.sleep(0.02)  # sh and two sleeps per replica
    assert len(group_members(pgids(handle))) == 6
    status = ex.stop(handle, grace_s=2)
    assert status.done and status.exit_codes == [-signal.SIGTERM] * 2
    assert group_members(pgids(handle)) == []
    assert ex.stop(handle) == status


def test_stop_escalates_to_sigkill(group_members: Callable[[list[int]], list[int]]) -> None:
    ex = LocalExecutor()
    handle = ex.launch(make_launch("trap '' TERM; sleep 30 & sleep 30"))
    time.sleep(0.3)  # let the shell install its trap
    status = ex.stop(handle, grace_s=0.3)
    assert status.exit_codes == [-signal.SIGKILL]
    assert group_members(pgids(handle)) == []


def test_reap_kills_a_dead_workers_attempt_on_this_host_only(
    group_members: Callable[[list[int]], list[int]],
) -> None:
    owner = LocalExecutor()
    handle = owner.launch(make_launch("sleep 30 & sleep 30"))
    other = LocalExecutor()  # another worker, which only has the stored handle
    other.reap({**handle, "host": "some-other-host"})
    # The shell and its two sleeps; on a loaded machine the sleeps may start late.
    deadline = time.monotonic() + 10
    while len(group_members(pgids(handle))) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(group_members(pgids(handle))) == 3
    assert other.poll(handle) == AttemptStatus(True, [None], {})  # not its child
    other.reap(handle)
    status = wait_done(owner, handle, timeout=5)
    assert status.exit_codes == [-signal.SIGKILL]
    assert group_members(pgids(handle)) == []


def test_reap_skips_a_reused_pid() -> None:
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        stale = {"host": socket.gethostname(), "replicas": [{"pid": proc.pid, "start": -1}]}
        LocalExecutor().reap(stale)  # same pid, different start time: not ours any more
        time.sleep(0.1)
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


_DYING_WORKER = """
import sys
from pathlib import Path
from aifab.jobs.executors.base import Launch, ReplicaLaunch
from aifab.jobs.executors.local import LocalExecutor
from aifab.jobs.resources import Resources
log = Path(sys.argv[1])
launch = Launch("job-x", 1, "x", "default", 0, ["sleep", "30"], None, Resources(1, 64, 0),
                [ReplicaLaunch(0, "here", {}, log)])
handle = LocalExecutor().launch(launch)
print(handle["replicas"][0]["pid"], flush=True)
sys.stdin.read()
"""


def test_replicas_die_with_a_killed_worker(
    tmp_path: Any, group_members: Callable[[list[int]], list[int]]
) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-c", _DYING_WORKER, str(tmp_path / "r.log")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdout is not None
    pid = int(worker.stdout.readline())
    assert group_members([pid]) == [pid]
    worker.kill()
    worker.communicate()
    deadline = time.monotonic() + 5
    while group_members([pid]) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert group_members([pid]) == []  # PR_SET_PDEATHSIG


def test_peak_memory_is_the_replicas_own() -> None:
    ex = LocalExecutor()
    big = ex.launch(
        make_launch(f'{sys.executable} -c "import time; b = bytearray(200 << 20); time.sleep(1)"')
    )
    small = ex.launch(make_launch("sleep 1"))
    while not all([ex.poll(big).done, ex.poll(small).done]):  # as the worker: poll every one
        time.sleep(0.02)
    big_mb = ex.poll(big).usage["peak_rss_mb"]
    small_mb = ex.poll(small).usage["peak_rss_mb"]
    assert big_mb >= 190
    # Not the worker's memory inherited across fork (this test process holds far more).
    assert small_mb < 30
