"""Job and queue service functions: the one place the CLI, server and pipeline submit work."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from aifab.core.audit import record_event
from aifab.core.config import as_config
from aifab.core.db import session_scope
from aifab.core.errors import ConflictError, InvalidInputError, NotFoundError
from aifab.core.id_prefix import complete_id
from aifab.core.ids import new_id
from aifab.core.names import SLUG, SLUG_RULE, check_name
from aifab.jobs.admission import check_admission
from aifab.jobs.detect import machine_resources
from aifab.jobs.recipes import RECIPES
from aifab.jobs.resources import limit_from_dict
from aifab.jobs.spec import JobSpec
from aifab.jobs.tables import AttemptRow, JobEventRow, JobRow, QueueRow, WorkerRow

ACTIVE = ("pending", "running")
FINAL = ("succeeded", "failed", "cancelled")
#: A worker silent this long is shown as dead (its jobs are recovered by lease expiry).
DEAD_AFTER_S = 60.0


def add_event(session: Session, job_id: str, kind: str, message: str = "") -> None:
    """Append a job event in the caller's transaction."""
    session.add(JobEventRow(job_id=job_id, ts=time.time(), kind=kind, message=message))


def _queue(session: Session, name: str, lock: str | None = None) -> QueueRow:
    """The queue row, locked to commit if asked.

    ``lock="share"`` keeps it from being deleted or changed (submitting to it);
    ``lock="update"`` waits for those submitters (deleting it).
    """
    q = session.get(
        QueueRow,
        name,
        with_for_update={"read": lock == "share"} if lock else None,
        populate_existing=lock is not None,
    )
    if q is None:
        known = ", ".join(session.scalars(select(QueueRow.name).order_by(QueueRow.name)))
        raise NotFoundError(f"queue {name!r} does not exist (queues: {known})")
    return q


def _check_fits(spec: JobSpec, queue: QueueRow) -> None:
    """Reject at submit a gang that could never start, with the numbers."""
    gang = spec.resources.to_resources().times(spec.gang)
    if queue.capability is not None:
        cap = limit_from_dict(queue.capability)
        if not gang.fits_in(cap):
            raise InvalidInputError(
                f"job needs {spec.gang} x (cpu {spec.resources.cpu:g}, memory "
                f"{spec.resources.memory:g} MiB, gpu {spec.resources.gpu}) but queue "
                f"{queue.name!r} capability allows less: {gang.shortfall(cap)}"
            )
    if spec.executor == "local":
        machine = machine_resources()
        if not spec.resources.to_resources().fits_in(machine) or not gang.fits_in(machine):
            raise InvalidInputError(
                f"job needs {spec.gang} x (cpu {spec.resources.cpu:g}, memory "
                f"{spec.resources.memory:g} MiB, gpu {spec.resources.gpu}) but this machine has "
                f"cpu {machine.cpu:g}, memory {machine.memory_mb:.0f} MiB, gpu {machine.gpu}: "
                f"{gang.shortfall(machine)}"
            )


def submit(spec: JobSpec | Path | str | Mapping[str, Any]) -> dict[str, Any]:
    """Validate and queue a job; return it as a dict (``id``, ``state`` = pending, ...).

    Raises:
        InvalidInputError: a malformed spec (the field is named), an unknown recipe, or a gang
            larger than its queue's capability or this machine (for the local executor).
        NotFoundError: the queue does not exist.
    """
    job = as_config(JobSpec, spec, "job spec")
    if job.run.recipe is not None and job.run.recipe not in RECIPES:
        raise InvalidInputError(
            f"run.recipe: unknown recipe {job.run.recipe!r} (known: {', '.join(RECIPES.names())})"
        )
    if job.workdir is None:
        job = job.model_copy(update={"workdir": os.getcwd()})
    check_admission(job)
    with session_scope() as s:
        _check_fits(job, _queue(s, job.queue, lock="share"))
        row = JobRow(
            id=new_id("job"),
            name=job.name,
            queue=job.queue,
            priority=job.priority,
            state="pending",
            spec=job.model_dump(mode="json"),
            executor=job.executor,
            attempt=0,
            reason="waiting for a scheduling cycle",
            usage={},
            submitted_at=time.time(),
            team=job.team,
            project=job.project,
        )
        s.add(row)
        s.flush()
        add_event(s, row.id, "submitted", f"queue {job.queue}, priority {job.priority}")
        record_event(s, "job.submit", f"job:{row.id}", row.spec)
        return job_dict(row)


def job_dict(row: JobRow) -> dict[str, Any]:
    """A job as a JSON-ready dict."""
    return {
        "id": row.id,
        "name": row.name,
        "queue": row.queue,
        "priority": row.priority,
        "state": row.state,
        "executor": row.executor,
        "attempt": row.attempt,
        "reason": row.reason,
        "exit_code": row.exit_code,
        "worker_id": row.worker_id,
        "submitted_at": row.submitted_at,
        "started_at": row.started_at,
        "finished_at": row.finished_at,
        "usage": row.usage,
        "spec": row.spec,
        "stop_request": row.stop_request,
        "team": row.team,
        "project": row.project,
    }


def _job(session: Session, job_id: str, *, lock: bool = False) -> JobRow:
    """The job (a unique id prefix names it); ``lock`` holds its row until commit."""
    full = complete_id(session, JobRow.id, job_id, "job")
    row = session.get(JobRow, full, with_for_update=lock or None, populate_existing=lock)
    if row is None:
        raise NotFoundError(f"job {job_id!r} not found (see 'aifab job list')")
    return row


def list_jobs(
    state: str | None = None, queue: str | None = None, limit: int = 100, offset: int = 0
) -> list[dict[str, Any]]:
    """Jobs, newest first, optionally filtered by state and queue; ``offset`` skips the newest."""
    with session_scope(readonly=True) as s:
        # Ids first, then their rows: sorting whole rows (specs, usage) of a long history
        # costs ten times more than sorting (time, id) pairs.
        q = select(JobRow.id).order_by(JobRow.submitted_at.desc(), JobRow.id.desc())
        q = q.offset(max(0, offset)).limit(limit)
        if state:
            q = q.where(JobRow.state == state)
        if queue:
            q = q.where(JobRow.queue == queue)
        ids = list(s.scalars(q))
        rows = {r.id: r for r in s.scalars(select(JobRow).where(JobRow.id.in_(ids)))}
        return [job_dict(rows[i]) for i in ids]


def get_job(job_id: str) -> dict[str, Any]:
    """One job with its attempts and events (a pending job's ``reason`` says why it waits)."""
    with session_scope(readonly=True) as s:
        row = _job(s, job_id)
        job_id = row.id  # what the caller typed may be a prefix
        out = job_dict(row)
        out["attempts"] = [
            {
                "number": a.number,
                "state": a.state,
                "worker_id": a.worker_id,
                "placement": a.placement,
                "exit_codes": a.exit_codes,
                "usage": a.usage,
                "reason": a.reason,
                "started_at": a.started_at,
                "finished_at": a.finished_at,
            }
            for a in s.scalars(
                select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.number)
            )
        ]
        out["events"] = [
            {"ts": e.ts, "kind": e.kind, "message": e.message}
            for e in s.scalars(
                select(JobEventRow).where(JobEventRow.job_id == job_id).order_by(JobEventRow.id)
            )
        ]
        return out


def cancel(job_id: str) -> dict[str, Any]:
    """Cancel a job: a pending one at once, a running one by asking its worker to stop it."""
    with session_scope() as s:
        row = _job(s, job_id, lock=True)
        job_id = row.id  # what the caller typed may be a prefix
        if row.state in FINAL:
            raise ConflictError(f"job {job_id} already {row.state}")
        if row.state == "pending":
            row.state, row.finished_at, row.reason = "cancelled", time.time(), "cancelled by user"
        else:
            row.stop_request, row.reason = "cancel", "cancel requested"
        add_event(s, job_id, "cancel", row.reason)
        record_event(s, "job.cancel", f"job:{job_id}")
        return job_dict(row)


def retry(job_id: str) -> dict[str, Any]:
    """Queue a failed or cancelled job again (same id; its attempts continue)."""
    with session_scope() as s:
        row = _job(s, job_id, lock=True)
        job_id = row.id  # what the caller typed may be a prefix
        if row.state not in ("failed", "cancelled"):
            raise ConflictError(f"job {job_id} is {row.state}: only failed or cancelled jobs retry")
        row.state, row.reason, row.stop_request = "pending", "retried by user", None
        row.finished_at = row.exit_code = None
        add_event(s, job_id, "retry", "queued again by user")
        record_event(s, "job.retry", f"job:{job_id}")
        return job_dict(row)


def queue_dict(q: QueueRow, session: Session) -> dict[str, Any]:
    """A queue with its current load."""
    counts = dict(
        session.execute(
            select(JobRow.state, func.count())
            .where(JobRow.queue == q.name, JobRow.state.in_(ACTIVE))
            .group_by(JobRow.state)
        ).all()
    )
    return {
        "name": q.name,
        "weight": q.weight,
        "capability": q.capability,
        "reclaimable": q.reclaimable,
        "pending": int(counts.get("pending", 0)),
        "running": int(counts.get("running", 0)),
    }


def _capability(cpu: float | None, memory: Any, gpu: int | None) -> dict[str, Any] | None:
    if cpu is None and memory is None and gpu is None:
        return None
    from aifab.jobs.spec import parse_memory_mb

    cap: dict[str, Any] = {}
    if cpu is not None:
        cap["cpu"] = float(cpu)
    if memory is not None:
        try:
            cap["memory_mb"] = parse_memory_mb(memory)
        except ValueError as exc:
            raise InvalidInputError(f"capability memory: {exc}") from None
    if gpu is not None:
        cap["gpu"] = int(gpu)
    return cap


def create_queue(
    name: str,
    *,
    weight: float = 1.0,
    cpu: float | None = None,
    memory: Any = None,
    gpu: int | None = None,
    reclaimable: bool = True,
) -> dict[str, Any]:
    """Create a queue with a weight (fair share) and an optional capability (max in use)."""
    check_name(name, "queue", pattern=SLUG, rule=SLUG_RULE)
    if weight <= 0:
        raise InvalidInputError(f"weight must be > 0, got {weight}")
    with session_scope() as s:
        if s.get(QueueRow, name) is not None:
            raise ConflictError(f"queue {name!r} already exists")
        q = QueueRow(
            name=name,
            weight=weight,
            capability=_capability(cpu, memory, gpu),
            reclaimable=reclaimable,
            created_at=time.time(),
        )
        s.add(q)
        s.flush()
        record_event(s, "queue.create", f"queue:{name}", queue_dict(q, s))
        return queue_dict(q, s)


def update_queue(
    name: str,
    *,
    weight: float | None = None,
    cpu: float | None = None,
    memory: Any = None,
    gpu: int | None = None,
    reclaimable: bool | None = None,
) -> dict[str, Any]:
    """Change a queue's weight, capability or reclaimability."""
    with session_scope() as s:
        q = _queue(s, name)
        if weight is not None:
            if weight <= 0:
                raise InvalidInputError(f"weight must be > 0, got {weight}")
            q.weight = weight
        if cpu is not None or memory is not None or gpu is not None:
            q.capability = _capability(cpu, memory, gpu)
        if reclaimable is not None:
            q.reclaimable = reclaimable
        record_event(s, "queue.update", f"queue:{name}", queue_dict(q, s))
        return queue_dict(q, s)


def delete_queue(name: str) -> None:
    """Delete a queue that has no pending or running jobs (never the default queue)."""
    if name == "default":
        raise ConflictError("the default queue cannot be deleted")
    with session_scope() as s:
        q = _queue(s, name, lock="update")
        active = s.scalar(
            select(func.count()).where(JobRow.queue == name, JobRow.state.in_(ACTIVE))
        )
        if active:
            raise ConflictError(f"queue {name!r} still has {active} pending or running job(s)")
        s.delete(q)
        record_event(s, "queue.delete", f"queue:{name}")


def list_queues() -> list[dict[str, Any]]:
    """All queues with their load."""
    with session_scope(readonly=True) as s:
        return [queue_dict(q, s) for q in s.scalars(select(QueueRow).order_by(QueueRow.name))]


def list_workers(alive_only: bool = False) -> list[dict[str, Any]]:
    """Workers with their executor, capacity and last heartbeat (newest first)."""
    with session_scope(readonly=True) as s:
        q = select(WorkerRow).order_by(WorkerRow.started_at.desc())
        if alive_only:
            q = q.where(
                WorkerRow.state == "alive", WorkerRow.heartbeat_at >= time.time() - DEAD_AFTER_S
            )
        return [
            {
                "id": w.id,
                "host": w.host,
                "pid": w.pid,
                "executor": w.executor,
                "capacity": w.capacity,
                "state": w.state,
                "started_at": w.started_at,
                "heartbeat_at": w.heartbeat_at,
            }
            for w in s.scalars(q)
        ]


def job_result(job_id: str) -> dict[str, Any] | None:
    """What the recipe of a succeeded job returned (its summary), or None.

    Raises:
        NotFoundError: no such job.
    """
    import json

    from aifab.core.storage import local_file
    from aifab.core.workspace import get_workspace
    from aifab.jobs.launch import result_path

    with session_scope(readonly=True) as s:
        row = _job(s, job_id)
        job_id = row.id  # what the caller typed may be a prefix
        if row.state != "succeeded":
            return None
        path = result_path(job_id, row.attempt)
    if not path.exists():
        try:  # written on another node: it is on the object store (when there is one)
            path = local_file(path.relative_to(get_workspace().root).as_posix())
        except FileNotFoundError:
            return None
        if not path.exists():
            return None
    result: dict[str, Any] = json.loads(path.read_text())
    return result
