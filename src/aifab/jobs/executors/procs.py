"""Process-group helpers shared by the executors that run replicas as local processes.

Plain Python, no Ray: the local executor uses them in the worker, the Ray executor on its nodes.
"""

from __future__ import annotations

import contextlib
import os
import signal


def proc_stat(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` from the state on (field n is at index n - 3), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode(errors="replace")
    except OSError:
        return None
    return raw.rsplit(")", 1)[1].split()


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (tells a reused pid apart), or None."""
    fields = proc_stat(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def peak_rss_mb(pid: int) -> float:
    """Peak RSS of ``pid`` since its exec (``VmHWM``); 0 once it has exited.

    ``ru_maxrss`` would not do: on Linux a child inherits its forking parent's peak across exec,
    so every replica would report at least the worker's own memory.
    """
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of group ``pgid``."""
    if not os.path.isdir("/proc"):
        return []
    members = []
    for name in os.listdir("/proc"):
        fields = proc_stat(int(name)) if name.isdigit() else None
        if fields and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(name))
    return members


def group_peak_rss_mb(pgid: int) -> float:
    """Sum of the peak RSS of the live processes of group ``pgid`` (a replica and its children)."""
    return sum(peak_rss_mb(pid) for pid in group_members(pgid))


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still runs (zombies waiting to be reaped do not)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not os.path.isdir("/proc") or bool(group_members(pgid))


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid`` if it still exists."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def kill_group(pgid: int, start: int | None) -> None:
    """SIGKILL process group ``pgid`` unless its leader's pid now belongs to another process."""
    now = start_ticks(pgid)
    if start is not None and now is not None and now != start:
        return
    signal_group(pgid, signal.SIGKILL)
