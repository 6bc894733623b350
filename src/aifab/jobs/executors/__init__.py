"""Executors by name: ``local`` (default), ``ray`` and ``volcano``."""

from __future__ import annotations

from typing import Any

from aifab.core.registry import Registry
from aifab.jobs.executors.base import AttemptStatus, Executor, Launch, ReplicaLaunch

EXECUTORS = Registry(
    "executor",
    {
        "local": "aifab.jobs.executors.local:LocalExecutor",
        "ray": "aifab.jobs.executors.ray:RayExecutor",
        "volcano": "aifab.jobs.executors.volcano:VolcanoExecutor",
    },
)


def get_executor(name: str, **options: Any) -> Executor:
    """Build the executor registered as ``name``."""
    executor: Executor = EXECUTORS.get(name)(**options)
    return executor


__all__ = ["EXECUTORS", "AttemptStatus", "Executor", "Launch", "ReplicaLaunch", "get_executor"]
