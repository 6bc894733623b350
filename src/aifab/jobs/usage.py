"""What the scheduler holds and held: queues' use against share and capability, and a timeline.

Read-only views for people (the dashboard, reports): :func:`queue_usage` applies the same
fair-share arithmetic as a scheduling cycle (:func:`aifab.jobs.policy.deserved_shares`) to the
capacity of the live workers; :func:`attempt_timeline` lists which attempt ran where, when.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from sqlalchemy import func, select

from aifab.core.db import session_scope
from aifab.jobs.policy import QueuePolicy, deserved_shares
from aifab.jobs.resources import ZERO, Resources, limit_from_dict
from aifab.jobs.scheduler import running_jobs
from aifab.jobs.service import DEAD_AFTER_S
from aifab.jobs.tables import AttemptRow, JobRow, QueueRow, WorkerRow

__all__ = ["attempt_timeline", "queue_usage"]

_DIMS = ("cpu", "memory_mb", "gpu")


def _live_capacity(session: Any) -> tuple[Resources, int]:
    """The summed capacity of the workers alive now, and how many they are."""
    alive = list(
        session.scalars(
            select(WorkerRow.capacity).where(
                WorkerRow.state == "alive", WorkerRow.heartbeat_at >= time.time() - DEAD_AFTER_S
            )
        )
    )
    out = ZERO
    for cap in alive:
        out = out + Resources.from_dict(cap)
    return out, len(alive)


def _pending_demand(session: Any) -> dict[str, Resources]:
    """What each queue's pending jobs ask for, summed in the database (no spec is decoded)."""
    spec = JobRow.spec
    gang = func.coalesce(spec["min_available"].as_integer(), spec["replicas"].as_integer())
    rows = session.execute(
        select(
            JobRow.queue,
            func.sum(spec[("resources", "cpu")].as_float() * gang),
            func.sum(spec[("resources", "memory")].as_float() * gang),
            func.sum(spec[("resources", "gpu")].as_integer() * gang),
        )
        .where(JobRow.state == "pending")
        .group_by(JobRow.queue)
    )
    demand: dict[str, Resources] = defaultdict(lambda: ZERO)
    for queue, cpu, memory, gpu in rows:
        demand[queue] = Resources(float(cpu or 0), float(memory or 0), int(gpu or 0))
    return demand


def _quota_use(used: Resources, capability: dict[str, Any] | None) -> float | None:
    """The largest fraction of a capability in use (None: the queue has no capability)."""
    if not capability:
        return None
    cap = limit_from_dict(capability)
    shares = [getattr(used, d) / getattr(cap, d) for d in _DIMS if d in capability]
    return max((s for s in shares if s == s), default=0.0)  # s == s drops 0/0 NaN


def queue_usage() -> dict[str, Any]:
    """Queues with their weight share, resources in use, deserved share and capability use.

    Returns:
        ``{"capacity": {...}, "workers": n, "queues": [...]}``; each queue has ``name``,
        ``weight``, ``weight_share`` (its weight over all weights), ``capability``,
        ``reclaimable``, ``pending``, ``running``, ``used`` (resources its running jobs hold),
        ``used_share`` (their dominant share of the live capacity), ``deserved`` (the fair share
        of the live capacity it would get for its demand, or None with no live worker) and
        ``quota_use`` (the largest fraction of its capability in use, or None if unlimited).
    """
    with session_scope(readonly=True) as s:
        rows = list(s.scalars(select(QueueRow).order_by(QueueRow.name)))
        counts = {
            (q, st): int(n)
            for q, st, n in s.execute(
                select(JobRow.queue, JobRow.state, func.count())
                .where(JobRow.state.in_(("pending", "running")))
                .group_by(JobRow.queue, JobRow.state)
            )
        }
        used: dict[str, Resources] = defaultdict(lambda: ZERO)
        for rj in running_jobs(s):
            used[rj.queue] += rj.total
        demand = _pending_demand(s)
        capacity, workers = _live_capacity(s)
    policies = {
        q.name: QueuePolicy(
            q.name, q.weight, limit_from_dict(q.capability) if q.capability else None, q.reclaimable
        )
        for q in rows
    }
    wants = {q: used[q] + demand[q] for q in policies}
    deserved = deserved_shares(capacity, policies, wants) if workers else {}
    weights = sum(q.weight for q in rows) or 1.0
    queues = [
        {
            "name": q.name,
            "weight": q.weight,
            "weight_share": q.weight / weights,
            "capability": q.capability,
            "reclaimable": q.reclaimable,
            "pending": counts.get((q.name, "pending"), 0),
            "running": counts.get((q.name, "running"), 0),
            "used": used[q.name].to_dict(),
            "used_share": used[q.name].dominant_share(capacity),
            "deserved": deserved[q.name].to_dict() if q.name in deserved else None,
            "quota_use": _quota_use(used[q.name], q.capability),
        }
        for q in rows
    ]
    return {"capacity": capacity.to_dict(), "workers": workers, "queues": queues}


def attempt_timeline(limit: int = 50, job_id: str | None = None) -> list[dict[str, Any]]:
    """The latest attempts (newest first): which job ran where (worker, nodes), from when to when.

    Args:
        limit: how many attempts, newest first.
        job_id: only this job's attempts.

    Returns:
        Dicts with ``job_id``, ``job_name``, ``queue``, ``number``, ``state``, ``worker_id``,
        ``executor`` and ``host`` of the worker (None if it is unknown), ``placement``,
        ``started_at`` and ``finished_at`` (None while it runs).
    """
    # Attempt ids first, then their rows: sorting joined rows of a long history costs more.
    latest = select(AttemptRow.id).order_by(AttemptRow.started_at.desc(), AttemptRow.id.desc())
    if job_id is not None:
        latest = latest.where(AttemptRow.job_id == job_id)
    query = (
        select(AttemptRow, JobRow.name, JobRow.queue, WorkerRow.executor, WorkerRow.host)
        .join(JobRow, JobRow.id == AttemptRow.job_id)
        .outerjoin(WorkerRow, WorkerRow.id == AttemptRow.worker_id)
        .where(AttemptRow.id.in_(latest.limit(max(0, limit)).scalar_subquery()))
        .order_by(AttemptRow.started_at.desc(), AttemptRow.id.desc())
    )
    with session_scope(readonly=True) as s:
        return [
            {
                "job_id": a.job_id,
                "job_name": name,
                "queue": queue,
                "number": a.number,
                "state": a.state,
                "worker_id": a.worker_id,
                "executor": executor,
                "host": host,
                "placement": list(a.placement),
                "started_at": a.started_at,
                "finished_at": a.finished_at,
            }
            for a, name, queue, executor, host in s.execute(query)
        ]
