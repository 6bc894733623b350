"""The executor interface: how a job's replicas are launched, watched and stopped somewhere."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from aifab.jobs.policy import Node
from aifab.jobs.resources import Resources


@dataclass(frozen=True)
class ReplicaLaunch:
    """One replica: its rank, the node it was placed on, its environment and log file."""

    rank: int
    node: str
    env: dict[str, str]
    log_path: Path


@dataclass(frozen=True)
class Launch:
    """Everything an executor needs to start one attempt of a job."""

    job_id: str
    attempt: int
    name: str
    queue: str
    priority: int
    argv: list[str]
    workdir: str | None
    resources: Resources
    replicas: list[ReplicaLaunch]
    timeout_s: float | None = None
    spec: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AttemptStatus:
    """Where an attempt stands: ``done`` once every replica exited (or was stopped).

    ``usage`` holds ``wall_s``, ``cpu_s``, ``peak_rss_mb``, ``gpu_s`` and a ``replicas`` list of
    the same per replica, as far as the executor can measure them.
    """

    done: bool
    exit_codes: list[int | None]
    usage: dict[str, Any] = field(default_factory=dict)

    @property
    def succeeded(self) -> bool:
        """True when done and every replica exited 0."""
        return self.done and all(c == 0 for c in self.exit_codes)


#: Final statuses an executor keeps so a repeated poll/stop of a finished attempt answers the same.
KEEP_DONE = 256


def unknown_status(handle: dict[str, Any]) -> AttemptStatus:
    """The status of an attempt this process did not start (nothing can be measured)."""
    return AttemptStatus(True, [None] * len(handle.get("replicas", [])), {})


def remember_done(done: dict[str, AttemptStatus], key: str, status: AttemptStatus) -> None:
    """Record ``key``'s final status in ``done``, forgetting the oldest beyond ``KEEP_DONE``."""
    done[key] = status
    while len(done) > KEEP_DONE:
        del done[next(iter(done))]


class Executor(Protocol):
    """Runs attempts. Handles are JSON so another worker can clean up after a dead one."""

    name: str
    #: True when the backend places jobs itself (Volcano): the worker submits without planning.
    self_scheduling: bool

    def nodes(self) -> list[Node]:
        """Capacity this executor offers, one entry per node (``used`` left at zero)."""
        ...

    def launch(self, launch: Launch) -> dict[str, Any]:
        """Start every replica; return a JSON handle."""
        ...

    def poll(self, handle: dict[str, Any]) -> AttemptStatus:
        """Check on an attempt started by this process."""
        ...

    def stop(self, handle: dict[str, Any], grace_s: float = 5.0) -> AttemptStatus:
        """Terminate every replica (SIGTERM, then SIGKILL after ``grace_s``); wait for them."""
        ...

    def reap(self, handle: dict[str, Any]) -> None:
        """Kill whatever is left of an attempt whose worker died (no orphans)."""
        ...
