"""What the Ray executor runs on a Ray node: one replica's process group, and its cleanup.

Plain Python with no ``import ray`` (``aifab.jobs.executors.ray`` wraps these in ``ray.remote``).
A replica starts in a new session, so a stop reaches its children, and on Linux it dies with the
actor that started it (``PR_SET_PDEATHSIG``); what it left behind is killed by process group.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aifab.jobs.executors.procs import peak_rss_mb, signal_group, start_ticks

_TICK_S = 0.05
# Replicas start through this: set PR_SET_PDEATHSIG (1) to SIGKILL (9), then exec the command.
_EXEC = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, 9)\n"
    "if os.getppid() != int(sys.argv[1]): os._exit(137)\n"
    "try: os.execvp(sys.argv[2], sys.argv[2:])\n"
    "except OSError as e: print(f'aifab: cannot run {sys.argv[2]}: {e.strerror}'); os._exit(127)\n"
)


class ReplicaProcess:
    """Ray actor body: ``start`` a replica, ``wait`` for it, ``stop`` it from a concurrent call."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._started = 0.0
        self._shipper: Any = None
        self._home: Path | None = None

    def free_port(self) -> int:
        """A TCP port free on this node (rank 0 hosts the rendezvous)."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            return int(sock.getsockname()[1])

    def start(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        log_path: str,
        ship_to: tuple[str, str] | None = None,
        node_home: str | None = None,
    ) -> dict[str, Any]:
        """Start the replica; return its pid (= process group) and start time.

        ``ship_to`` (storage URI, log key): also copy the log to the object store in chunks
        while the replica runs, for the head and any other machine to read. ``node_home``:
        the replica's own folder on this node (its log, lake cache, scratch), removed once the
        replica has exited and its log is on the store.
        """
        # A replica that submits Ray jobs itself (a pipeline's `executor: ray` step) joins
        # this cluster instead of starting a Ray instance on the node.
        joined = "RAY_ADDRESS" in env or "RAY_ADDRESS" in os.environ
        if not joined and (address := _cluster_address()):
            env = {**env, "RAY_ADDRESS": address}
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        if sys.platform.startswith("linux"):
            argv = [sys.executable, "-c", _EXEC, str(os.getpid()), *argv]
        with open(log_path, "ab") as out:
            self._proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env={**os.environ, **env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._started = time.monotonic()
        info: dict[str, Any] = {"pgid": self._proc.pid, "start": start_ticks(self._proc.pid)}
        if ship_to is not None:
            from aifab.core.storage import store_at
            from aifab.jobs.log_ship import LogShipper

            uri, key = ship_to
            try:
                self._shipper = LogShipper(Path(log_path), key, store_at(uri)).start()
            except Exception as exc:  # noqa: BLE001 - the replica runs; the head says why
                # (a node without the store's credentials): its log stays on this node.
                info["log_not_shipped"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            else:
                self._home = Path(node_home) if node_home else None
        return info

    def wait(self) -> dict[str, Any]:
        """Wait for the replica to exit; kill what it left; return exit code and usage."""
        assert self._proc is not None, "start() first"
        pid, peak = self._proc.pid, 0.0
        # Peek without reaping: while the leader is a zombie its pid (the group id) cannot be
        # reused, so killing what it left in its group cannot hit a stranger.
        while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            peak = max(peak, peak_rss_mb(pid))
            time.sleep(_TICK_S)
        signal_group(pid, signal.SIGKILL)
        _, status, rusage = os.wait4(pid, 0)
        self._proc.returncode = os.waitstatus_to_exitcode(status)
        if self._shipper is not None:  # all of the log is on the store before the exit is known
            self._shipper.close()
        if self._home is not None:
            _remove_home(self._home)
        return {
            "exit_code": self._proc.returncode,
            "wall_s": time.monotonic() - self._started,
            "cpu_s": float(rusage.ru_utime + rusage.ru_stime),
            "peak_rss_mb": peak,
        }

    def stop(self, grace_s: float) -> None:
        """SIGTERM the replica's process group, SIGKILL it after ``grace_s``."""
        if self._proc is None:
            return
        pgid = self._proc.pid
        signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        with contextlib.suppress(ProcessLookupError, PermissionError):
            while time.monotonic() < deadline:
                os.killpg(pgid, 0)
                time.sleep(_TICK_S)
        signal_group(pgid, signal.SIGKILL)


def _cluster_address() -> str | None:
    """The GCS address of the Ray cluster this actor runs in (None outside a Ray worker)."""
    ray = sys.modules.get("ray")  # imported already in a Ray worker; never imported here
    if ray is None or not ray.is_initialized():
        return None
    return str(ray.get_runtime_context().gcs_address) or None


def _remove_home(home: Path) -> None:
    """Remove a replica's node folder, then its attempt's and job's folders once empty."""
    shutil.rmtree(home, ignore_errors=True)
    for parent in (home.parent, home.parent.parent):
        try:
            parent.rmdir()
        except OSError:  # another replica of the job still uses it on this node
            return
