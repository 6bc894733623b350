"""The scheduler's DB side: workers, leases, planning a cycle, finishing and recovering attempts.

Every state change is a conditional update inside one transaction (SQLite takes the write lock
at BEGIN), so several workers can share one metadata DB and a job never completes twice: an
attempt can only finish the job while it is still the job's current attempt on that worker.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from aifab.core.db import lock_aggregate, session_scope
from aifab.core.ids import new_id
from aifab.jobs.executors.base import AttemptStatus
from aifab.jobs.policy import JobRequest, Node, Policy, QueuePolicy, RunningJob, schedule
from aifab.jobs.resources import ZERO, Resources, limit_from_dict
from aifab.jobs.service import DEAD_AFTER_S, add_event
from aifab.jobs.spec import JobSpec
from aifab.jobs.tables import AttemptRow, JobRow, QueueRow, WorkerRow

#: Lost-worker and preemption re-queues allowed before a job is failed (they use no retries).
MAX_REQUEUES = 10
_PENDING_WINDOW = 2000


@dataclass(frozen=True)
class Claim:
    """A job this worker has claimed: start attempt ``attempt`` with replicas on ``nodes``."""

    job_id: str
    attempt: int
    nodes: tuple[str, ...]
    spec: JobSpec


def unserved_reason(executor: str) -> str:
    """Why a pending job waits when no live worker runs its executor, and what to do."""
    command = "aifab worker" if executor == "local" else f"aifab worker --executor {executor}"
    return f"no running worker serves executor {executor!r}: start one with '{command}'"


def mark_unserved() -> dict[str, int]:
    """Say so on pending jobs whose executor no live worker serves (shown by ``job show``).

    A worker runs one executor; without this a job for another one waited with no word why.
    Returns the number of such jobs per executor (within the first pending window).
    """
    now = time.time()
    counts: dict[str, int] = {}
    with session_scope() as s:
        served = list(
            s.scalars(
                select(WorkerRow.executor).where(
                    WorkerRow.state == "alive", WorkerRow.heartbeat_at >= now - DEAD_AFTER_S
                )
            )
        )
        rows = s.execute(
            select(JobRow.id, JobRow.executor, JobRow.reason)
            .where(JobRow.state == "pending", JobRow.executor.not_in(served))
            .limit(_PENDING_WINDOW)
        ).all()
        changed = []
        for row in rows:
            counts[row.executor] = counts.get(row.executor, 0) + 1
            if row.reason != (why := unserved_reason(row.executor)):
                changed.append({"id": row.id, "reason": why})
        if changed:
            s.execute(update(JobRow).execution_options(synchronize_session=False), changed)
    return counts


def register_worker(executor: str, capacity: Resources) -> str:
    """Record a new worker process and return its id."""
    import os

    wid = new_id("worker")
    with session_scope() as s:
        s.add(
            WorkerRow(
                id=wid,
                host=socket.gethostname(),
                pid=os.getpid(),
                executor=executor,
                capacity=capacity.to_dict(),
                state="alive",
                started_at=time.time(),
                heartbeat_at=time.time(),
            )
        )
    return wid


def heartbeat(worker_id: str, lease_s: float) -> None:
    """Prove this worker is alive and extend the leases of its running jobs."""
    now = time.time()
    with session_scope() as s:
        w = s.get(WorkerRow, worker_id)
        if w is not None:
            w.heartbeat_at, w.state = now, "alive"
        # One conditional UPDATE, not read-then-write: a job that recover_lost() or finish()
        # took from this worker meanwhile keeps no lease (PostgreSQL rechecks the WHERE).
        s.execute(
            update(JobRow)
            .where(JobRow.worker_id == worker_id, JobRow.state == "running")
            .values(lease_until=now + lease_s)
            .execution_options(synchronize_session=False)
        )


def retire_worker(worker_id: str) -> None:
    """Mark a worker as stopped (a clean shutdown)."""
    with session_scope() as s:
        w = s.get(WorkerRow, worker_id)
        if w is not None:
            w.state = "stopped"


def _queues(s: Session) -> dict[str, QueuePolicy]:
    return {
        q.name: QueuePolicy(
            q.name, q.weight, limit_from_dict(q.capability) if q.capability else None, q.reclaimable
        )
        for q in s.scalars(select(QueueRow))
    }


def _replica(spec: dict[str, Any]) -> Resources:
    """Per-replica resources of a stored (already validated) spec, without re-validating it."""
    r = spec["resources"]
    return Resources(float(r["cpu"]), float(r["memory"]), int(r["gpu"]))


def _request(row: JobRow) -> JobRequest:
    spec = row.spec
    return JobRequest(
        id=row.id,
        queue=row.queue,
        priority=row.priority,
        submitted_at=row.submitted_at,
        replica=_replica(spec),
        replicas=int(spec["replicas"]),
        min_available=spec.get("min_available"),
    )


def running_jobs(s: Session) -> list[RunningJob]:
    """Running jobs with the placement of their current attempt."""
    out = []
    rows = s.execute(
        select(JobRow, AttemptRow)
        .join(AttemptRow, (AttemptRow.job_id == JobRow.id) & (AttemptRow.number == JobRow.attempt))
        .where(JobRow.state == "running")
    ).all()
    for job, att in rows:
        replica = _replica(job.spec)
        out.append(
            RunningJob(
                job.id,
                job.queue,
                job.priority,
                att.started_at,
                tuple((n, replica) for n in att.placement),
                bool(job.spec.get("preemptible", True)),
            )
        )
    return out


def plan(
    worker_id: str,
    executor: str,
    nodes: Sequence[Node],
    *,
    lease_s: float,
    self_scheduling: bool = False,
    policy: Policy = "aifab",
) -> list[Claim]:
    """Run one scheduling cycle for this worker's nodes and claim the jobs that start.

    Jobs that must wait get their reason updated; victims of preemption get a stop request
    (their own worker stops them, then they go back to the queue).
    """
    now = time.time()
    claims: list[Claim] = []
    with session_scope() as s:
        # Planners of one executor take turns (one sees the other's claims and the capacity
        # they use); the pending rows they claim stay locked to commit, so a cancel cannot
        # slip in between. Rows another transaction holds wait for the next cycle.
        lock_aggregate(s, "job-plan", executor)
        pending_rows = list(
            s.scalars(
                select(JobRow)
                .where(JobRow.state == "pending", JobRow.executor == executor)
                .order_by(JobRow.priority.desc(), JobRow.submitted_at)
                .limit(_PENDING_WINDOW)
                .with_for_update(skip_locked=True)
            )
        )
        if not pending_rows:
            return claims
        by_id = {r.id: r for r in pending_rows}
        starts: list[tuple[str, tuple[str, ...], tuple[str, ...]]]
        if self_scheduling:
            starts = [(r.id, ("cluster",) * int(r.spec["replicas"]), ()) for r in pending_rows]
            waiting: dict[str, str] = {}
        else:
            running = running_jobs(s)
            used = {n.name: ZERO for n in nodes}
            for rj in running:
                for node, r in rj.placement:
                    if node in used:
                        used[node] = used[node] + r
            snapshot = [replace(n, used=used[n.name]) for n in nodes]
            decision = schedule(
                snapshot,
                _queues(s),
                [_request(r) for r in pending_rows],
                running,
                now=now,
                policy=policy,
            )
            starts = [(st.job_id, st.nodes, st.preempt) for st in decision.starts]
            waiting = dict(decision.waiting)
            for victim_id, why in decision.preempted.items():
                victim = s.get(JobRow, victim_id, with_for_update=True, populate_existing=True)
                if victim is not None and victim.state == "running" and not victim.stop_request:
                    victim.stop_request, victim.reason = "preempt", why
                    add_event(s, victim_id, "preempting", why)
        if starts:  # new attempt ids: the cost collector's cursor waits for them to commit
            lock_aggregate(s, "cost-source", "attempts", shared=True)
        for job_id, placed, victims in starts:
            row = by_id[job_id]
            if victims:
                waiting[job_id] = f"waiting for {len(victims)} preempted job(s) to stop"
                continue
            row.state, row.attempt, row.worker_id = "running", row.attempt + 1, worker_id
            row.lease_until, row.reason, row.stop_request = now + lease_s, None, None
            row.started_at = row.started_at or now
            s.add(
                AttemptRow(
                    job_id=row.id,
                    number=row.attempt,
                    worker_id=worker_id,
                    state="running",
                    placement=list(placed),
                    handle={},
                    exit_codes=[],
                    usage={},
                    started_at=now,
                )
            )
            add_event(s, row.id, "started", f"attempt {row.attempt} on {', '.join(placed)}")
            claims.append(
                Claim(row.id, row.attempt, tuple(placed), JobSpec.model_validate(row.spec))
            )
        changed = [
            {"id": job_id, "reason": why}
            for job_id, why in waiting.items()
            if (w := by_id.get(job_id)) is not None and w.state == "pending" and w.reason != why
        ]
        if changed:
            # One executemany instead of an ORM flush per row: a backlog of thousands of
            # waiting jobs gets new reasons whenever the free capacity changes.
            s.execute(update(JobRow).execution_options(synchronize_session=False), changed)
    return claims


def record_handle(job_id: str, attempt: int, handle: dict[str, Any]) -> None:
    """Store the executor's handle so another worker can clean up if this one dies."""
    with session_scope() as s:
        att = s.scalar(
            select(AttemptRow).where(AttemptRow.job_id == job_id, AttemptRow.number == attempt)
        )
        if att is not None:
            att.handle = handle


def ownership(
    worker_id: str, attempts: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], tuple[bool, str | None]]:
    """For each (job, attempt): whether it still owns its job, and any stop request for it."""
    if not attempts:
        return {}
    with session_scope() as s:
        rows = {
            r.id: r
            for r in s.scalars(select(JobRow).where(JobRow.id.in_([j for j, _ in attempts])))
        }
        out = {}
        for job_id, attempt in attempts:
            job = rows.get(job_id)
            ok = (
                job is not None
                and job.state == "running"
                and job.attempt == attempt
                and job.worker_id == worker_id
            )
            out[(job_id, attempt)] = (ok, job.stop_request if ok and job is not None else None)
        return out


def _add_usage(total: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    out = dict(total)
    for key in ("wall_s", "cpu_s", "gpu_s"):
        out[key] = float(out.get(key, 0.0)) + float(part.get(key, 0.0))
    out["peak_rss_mb"] = max(
        float(out.get("peak_rss_mb", 0.0)), float(part.get("peak_rss_mb", 0.0))
    )
    return out


def finish(
    job_id: str,
    attempt: int,
    worker_id: str,
    status: AttemptStatus,
    outcome: str,
    reason: str | None = None,
) -> str | None:
    """Close an attempt and move the job on; ``None`` if the attempt no longer owns the job.

    Args:
        job_id: the job.
        attempt: the attempt number that ended.
        worker_id: the worker that ran it (must still own the job).
        status: exit codes and usage from the executor.
        outcome: ``succeeded``, ``failed``, ``timeout``, ``cancelled`` or ``preempted``.
        reason: a human-readable reason recorded on the attempt and job.

    Returns:
        The job's new state, or ``None`` when the attempt had been superseded.
    """
    now = time.time()
    with session_scope() as s:
        job = s.get(JobRow, job_id, with_for_update=True)  # vs. cancel, recovery, planning
        att = s.scalar(
            select(AttemptRow).where(AttemptRow.job_id == job_id, AttemptRow.number == attempt)
        )
        if job is None or att is None or att.state != "running":
            return None
        if reason is None and outcome == "preempted":
            reason = job.reason  # plan() wrote "preempted by job ..." with the stop request
        att.state, att.finished_at, att.reason = outcome, now, reason
        att.exit_codes, att.usage = list(status.exit_codes), dict(status.usage)
        if job.state != "running" or job.attempt != attempt or job.worker_id != worker_id:
            return None  # superseded: the job was re-queued while this attempt ran
        job.usage = _add_usage(job.usage or {}, status.usage)
        job.worker_id = job.lease_until = job.stop_request = None
        nonzero = next((c for c in status.exit_codes if c not in (0, None)), None)
        if outcome == "succeeded":
            job.state, job.exit_code, job.finished_at, job.reason = "succeeded", 0, now, None
        elif outcome == "cancelled":
            job.state, job.finished_at, job.reason = "cancelled", now, reason or "cancelled"
        elif outcome == "preempted":
            _requeue(s, job, reason or "preempted")
        else:
            failures = len(
                list(
                    s.scalars(
                        select(AttemptRow.id).where(
                            AttemptRow.job_id == job_id, AttemptRow.state.in_(("failed", "timeout"))
                        )
                    )
                )
            )
            max_retries = int(job.spec.get("max_retries", 0))
            why = reason or f"exit code {nonzero}"
            if failures <= max_retries:
                job.state, job.reason = "pending", f"retry {failures}/{max_retries} after {why}"
            else:
                job.state, job.finished_at, job.exit_code = "failed", now, nonzero
                job.reason = why
        add_event(s, job_id, outcome, f"attempt {attempt}: {reason or outcome}")
        return job.state


def _requeue(s: Session, job: JobRow, why: str) -> None:
    requeues = len(
        list(
            s.scalars(
                select(AttemptRow.id).where(
                    AttemptRow.job_id == job.id, AttemptRow.state.in_(("lost", "preempted"))
                )
            )
        )
    )
    if requeues > MAX_REQUEUES:
        job.state, job.finished_at = "failed", time.time()
        job.reason = f"{why}; gave up after {requeues} re-queues"
    else:
        job.state, job.reason = "pending", f"re-queued: {why}"


def recover_lost(reap: Callable[[dict[str, Any]], None] | None = None) -> list[str]:
    """Re-queue (or fail) running jobs whose worker stopped renewing its lease.

    Args:
        reap: called with each lost attempt's handle to kill what is left of it.

    Returns:
        Ids of the jobs recovered.
    """
    now = time.time()
    recovered = []
    with session_scope() as s:
        # Locked, and rechecked by PostgreSQL after any wait: a heartbeat that renewed the
        # lease, or a finish() that closed the job, meanwhile takes it out of the set.
        rows = list(
            s.scalars(
                select(JobRow)
                .where(JobRow.state == "running", JobRow.lease_until < now)
                .with_for_update(skip_locked=True)
            )
        )
        for job in rows:
            att = s.scalar(
                select(AttemptRow).where(
                    AttemptRow.job_id == job.id, AttemptRow.number == job.attempt
                )
            )
            why = f"worker {job.worker_id} stopped heartbeating"
            if att is not None:
                if reap is not None and att.handle:
                    reap(att.handle)
                att.state, att.finished_at, att.reason = "lost", now, why
            job.worker_id = job.lease_until = job.stop_request = None
            _requeue(s, job, why)
            add_event(s, job.id, "lost", why)
            recovered.append(job.id)
        for w in s.scalars(
            select(WorkerRow).where(
                WorkerRow.state == "alive", WorkerRow.heartbeat_at < now - DEAD_AFTER_S
            )
        ):
            w.state = "dead"
    return recovered
