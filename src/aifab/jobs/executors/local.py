"""The local executor: every replica is a process group on this machine, with its own log and GPUs.

A replica starts in a new session (so a stop reaches its children too) and, on Linux, dies with
the thread that started it (``PR_SET_PDEATHSIG``, set by the :mod:`~aifab.jobs.executors.deathsig`
trampoline after exec): run the worker loop in a thread that lives as long as its attempts. A
worker that finds a dead worker's attempt on this host kills what is left of it by process group
(:meth:`LocalExecutor.reap`).
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aifab.core.storage import get_store
from aifab.core.workspace import get_workspace
from aifab.jobs.detect import machine_resources
from aifab.jobs.executors.base import (
    AttemptStatus,
    Launch,
    ReplicaLaunch,
    remember_done,
    unknown_status,
)
from aifab.jobs.executors.procs import (
    group_alive,
    group_peak_rss_mb,
    kill_group,
    signal_group,
    start_ticks,
)
from aifab.jobs.log_ship import LogShipper
from aifab.jobs.policy import Node

#: Seconds the other replicas of a failed gang get after SIGTERM before SIGKILL.
GANG_GRACE_S = 5.0
_TICK_S = 0.02
#: Seconds to wait for killed process groups to vanish before giving up on them.
_KILL_WAIT_S = 10.0
_TRAMPOLINE = str(Path(__file__).with_name("deathsig.py"))


def _command(argv: list[str], cwd: str | None, env: dict[str, str]) -> list[str]:
    """``argv`` behind the death-signal trampoline (Linux), checked to exist first.

    Raises:
        FileNotFoundError: the command is not found or not executable (as Popen would say;
            behind the trampoline the failure would otherwise only show in the replica's log).
    """
    cmd = argv[0]
    if os.sep in cmd:  # relative to the replica's working directory, as exec resolves it
        path = os.path.join(cwd or ".", cmd)
        found = os.path.isfile(path) and os.access(path, os.X_OK)
    else:
        found = shutil.which(cmd, path=env.get("PATH", os.defpath)) is not None
    if not found:
        raise FileNotFoundError(errno.ENOENT, "no such executable", cmd)
    if not sys.platform.startswith("linux"):
        return argv
    # -I -S: the trampoline needs only the standard library; it starts in milliseconds.
    return [sys.executable, "-I", "-S", _TRAMPOLINE, str(os.getpid()), *argv]


@dataclass
class _Replica:
    rank: int
    proc: subprocess.Popen[bytes]
    started: float
    gpus: int
    code: int | None = None
    ended: float | None = None
    rusage: Any = None
    reaped: bool = False
    #: Stopped because another replica of its gang failed (its exit code is reported as None).
    peer_stopped: bool = False
    #: Highest VmHWM seen while it ran (see :func:`procs.peak_rss_mb`).
    peak_mb: float = 0.0
    #: Copies its log to the object store, when one is set (other nodes read it there).
    shipper: LogShipper | None = None


def _shipper(path: Path) -> LogShipper | None:
    """A shipper (not started) of the log ``path`` when the workspace is on an object store."""
    store = get_store()
    if store.is_local:
        return None
    key = path.relative_to(get_workspace().root).as_posix()
    return LogShipper(path, key, store)


@dataclass
class _Run:
    replicas: list[_Replica]
    gpus: list[str]
    kill_at: float | None = None


def _key(handle: dict[str, Any]) -> str:
    return str(handle.get("key", ""))


def _replica_usage(rep: _Replica) -> dict[str, Any]:
    wall = (rep.ended if rep.ended is not None else time.monotonic()) - rep.started
    ru = rep.rusage
    # ru_maxrss is KiB on Linux, bytes on macOS.
    rss_div = (1 << 20) if sys.platform == "darwin" else 1024
    return {
        "rank": rep.rank,
        "pid": rep.proc.pid,
        "exit_code": rep.code,
        "wall_s": wall,
        "cpu_s": float(ru.ru_utime + ru.ru_stime) if ru is not None else 0.0,
        # Sampled VmHWM; a replica too short-lived to be sampled falls back to ru_maxrss,
        # which overstates it by the worker's own memory at fork time.
        "peak_rss_mb": rep.peak_mb or (float(ru.ru_maxrss) / rss_div if ru is not None else 0.0),
        "gpu_s": rep.gpus * wall,
    }


def _status(run: _Run, done: bool) -> AttemptStatus:
    reps = [_replica_usage(r) for r in run.replicas]
    usage: dict[str, Any] = {
        key: sum(float(r[key]) for r in reps) for key in ("wall_s", "cpu_s", "gpu_s")
    }
    usage["peak_rss_mb"] = max((float(r["peak_rss_mb"]) for r in reps), default=0.0)
    usage["replicas"] = reps
    codes = [None if r.peer_stopped else r.code for r in run.replicas]
    return AttemptStatus(done, codes, usage)


class LocalExecutor:
    """Runs each replica as a subprocess (its own process group) on this machine."""

    name = "local"
    self_scheduling = False

    def __init__(self) -> None:
        self.host = socket.gethostname()
        self._gpu_ids = self._gpu_pool()
        self._gpus_in_use: set[str] = set()
        self._runs: dict[str, _Run] = {}
        self._done: dict[str, AttemptStatus] = {}

    @staticmethod
    def _gpu_pool() -> list[str]:
        """GPU ids to hand out: the worker's own CUDA_VISIBLE_DEVICES if set, else 0..n-1."""
        count = machine_resources().gpu
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        ids = [d.strip() for d in visible.split(",") if d.strip()]
        return (ids or [str(i) for i in range(count)])[:count]

    def nodes(self) -> list[Node]:
        """Return this machine as one node (``AIFAB_WORKER_*`` variables override detection)."""
        return [Node(self.host, machine_resources())]

    def launch(self, launch: Launch) -> dict[str, Any]:
        """Start every replica in its own process group; return the JSON handle.

        Raises:
            RuntimeError: fewer GPUs are free than the attempt needs.
            OSError: a replica could not be started (missing command or workdir); replicas
                already started are killed first.
        """
        per = launch.resources.gpu
        gpus = self._allot(per * len(launch.replicas))
        reps: list[_Replica] = []
        try:
            for i, rl in enumerate(launch.replicas):
                reps.append(self._spawn(launch, rl, gpus[i * per : (i + 1) * per]))
        except BaseException:
            self._kill_now(_Run(reps, gpus))
            self._gpus_in_use.difference_update(gpus)
            raise
        key = f"{launch.job_id}/{launch.attempt}"
        self._runs[key] = _Run(reps, gpus)
        return {
            "executor": self.name,
            "key": key,
            "host": self.host,
            "started_at": time.time(),
            "gpus": gpus,
            "replicas": [
                {
                    "rank": rep.rank,
                    "pid": rep.proc.pid,
                    "pgid": rep.proc.pid,  # setsid made each replica its group's leader
                    "start": start_ticks(rep.proc.pid),
                    "log": str(rl.log_path),
                    "gpus": gpus[i * per : (i + 1) * per],
                }
                for i, (rep, rl) in enumerate(zip(reps, launch.replicas, strict=True))
            ],
        }

    def _allot(self, count: int) -> list[str]:
        free = [g for g in self._gpu_ids if g not in self._gpus_in_use]
        if count > len(free):
            raise RuntimeError(f"needs {count} GPU(s) but only {len(free)} are free here")
        chosen = free[:count]
        self._gpus_in_use.update(chosen)
        return chosen

    def _spawn(self, launch: Launch, rl: ReplicaLaunch, gpus: list[str]) -> _Replica:
        rl.log_path.parent.mkdir(parents=True, exist_ok=True)
        shipper = _shipper(rl.log_path)  # before the process: a store error leaves no orphan
        env = {**os.environ, **rl.env, "CUDA_VISIBLE_DEVICES": ",".join(gpus)}
        with open(rl.log_path, "ab") as log:
            proc = subprocess.Popen(
                _command(list(launch.argv), launch.workdir, env),
                cwd=launch.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # setsid in C, PR_SET_PDEATHSIG after exec (deathsig.py): a preexec_fn would run
                # Python between fork and exec in this threaded process.
                start_new_session=True,
            )
        return _Replica(
            rl.rank, proc, time.monotonic(), len(gpus), shipper=shipper and shipper.start()
        )

    def poll(self, handle: dict[str, Any]) -> AttemptStatus:
        """Reap exited replicas (killing what they left behind); a failed replica stops its gang."""
        key = _key(handle)
        if key in self._done:
            return self._done[key]
        run = self._runs.get(key)
        if run is None:
            return unknown_status(handle)
        for rep in run.replicas:
            self._collect(rep)
        self._stop_failed_gang(run)
        status = _status(run, self._settled(run))
        if status.done:
            self._close(key, run, status)
        return status

    def _collect(self, rep: _Replica) -> None:
        """Reap ``rep`` if it exited, first killing what it left in its group."""
        if rep.reaped:
            return
        pid = rep.proc.pid
        if hasattr(os, "waitid"):
            # Peek without reaping: while the leader is a zombie its pid (the group id) cannot
            # be reused, so killing the group cannot hit a stranger.
            try:
                if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
                    rep.peak_mb = max(rep.peak_mb, group_peak_rss_mb(pid))
                    return
                signal_group(pid, signal.SIGKILL)
            except ChildProcessError:
                pass
        try:
            got, status, rusage = os.wait4(pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: the exit status is lost
            got, status, rusage = pid, None, None
        if got == 0:
            return
        rep.code = None if status is None else os.waitstatus_to_exitcode(status)
        rep.rusage, rep.ended, rep.reaped = rusage, time.monotonic(), True
        # Popen must never reap this pid itself (subprocess._cleanup polls forgotten children).
        rep.proc.returncode = rep.code if rep.code is not None else -1
        if not hasattr(os, "waitid"):
            signal_group(pid, signal.SIGKILL)

    def _stop_failed_gang(self, run: _Run) -> None:
        failed = any(
            r.reaped and r.code not in (0, None) and not r.peer_stopped for r in run.replicas
        )
        alive = [r for r in run.replicas if not r.reaped]
        if not failed or not alive:
            return
        if run.kill_at is None:
            run.kill_at = time.monotonic() + GANG_GRACE_S
            for rep in alive:
                rep.peer_stopped = True
                signal_group(rep.proc.pid, signal.SIGTERM)
        elif time.monotonic() >= run.kill_at:
            for rep in alive:
                signal_group(rep.proc.pid, signal.SIGKILL)

    def stop(self, handle: dict[str, Any], grace_s: float = 5.0) -> AttemptStatus:
        """SIGTERM every replica's group, SIGKILL after ``grace_s``; return once all are gone."""
        key = _key(handle)
        if key in self._done:
            return self._done[key]
        run = self._runs.get(key)
        if run is None:
            self.reap(handle)
            return unknown_status(handle)
        for rep in run.replicas:
            if not rep.reaped:
                signal_group(rep.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while not self._settled(run) and time.monotonic() < deadline:
            time.sleep(_TICK_S)
        self._kill_now(run)
        status = _status(run, True)
        self._close(key, run, status)
        return status

    def _settled(self, run: _Run) -> bool:
        """True once every leader is reaped and nothing is left in their groups."""
        for rep in run.replicas:
            self._collect(rep)
        if not all(r.reaped for r in run.replicas):
            return False
        lingering = [r for r in run.replicas if group_alive(r.proc.pid)]
        for rep in lingering:
            signal_group(rep.proc.pid, signal.SIGKILL)
        # An unkillable (D-state) descendant must not hold the attempt open forever.
        last_exit = max((r.ended or 0.0 for r in run.replicas), default=0.0)
        return not lingering or time.monotonic() - last_exit > _KILL_WAIT_S

    def _kill_now(self, run: _Run) -> None:
        """SIGKILL every group of ``run``, reap its leaders and wait for the groups to vanish."""
        while True:
            for rep in run.replicas:
                if not rep.reaped:
                    signal_group(rep.proc.pid, signal.SIGKILL)
            if self._settled(run):
                return
            time.sleep(_TICK_S)

    def _close(self, key: str, run: _Run, status: AttemptStatus) -> None:
        for rep in run.replicas:  # the whole log is on the store before the attempt ends
            if rep.shipper is not None:
                rep.shipper.close()
        self._gpus_in_use.difference_update(run.gpus)
        self._runs.pop(key, None)
        remember_done(self._done, key, status)

    def reap(self, handle: dict[str, Any]) -> None:
        """Kill the process groups of a dead worker's attempt, if it ran on this host."""
        if handle.get("host") != self.host:
            return
        for rep in handle.get("replicas", []):
            start = rep.get("start")
            kill_group(int(rep.get("pgid", rep["pid"])), int(start) if start is not None else None)
