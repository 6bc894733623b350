"""Schedules: recurring pipelines, monitors and jobs, run by the worker of serve and worker.

``aifab serve`` and ``aifab worker`` host the worker loop that calls :func:`run_due`. A due
schedule is claimed with a DB lease (one conditional UPDATE), so two workers never run it at
once; the lease is renewed while the run lasts. After downtime a schedule runs once, and its
next run is the next cron time after now.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import and_, or_, select, update

from aifab.core.actor import acting_as, current_actor
from aifab.core.audit import record_event
from aifab.core.db import session_scope
from aifab.core.errors import ConflictError, InvalidInputError, NotFoundError
from aifab.core.names import SHORT_NAME, is_full_match
from aifab.core.registry import Registry
from aifab.ops.cron import advance, check_cron, next_after
from aifab.ops.tables import ScheduleRow, ScheduleRunRow

__all__ = [
    "TARGETS",
    "create_schedule",
    "delete_schedule",
    "list_schedules",
    "run_due",
    "schedule_runs",
    "set_paused",
]

log = logging.getLogger("aifab.ops.schedules")

#: Target kind -> the function a run calls with the target. Pipelines sit above ops, so they
#: are reached by name, as jobs reach recipes.
TARGETS = Registry(
    "schedule target",
    {
        "pipeline": "aifab.ops.schedule_targets:run_pipeline_file",
        "monitor": "aifab.ops.schedule_targets:run_monitor_target",
        "job": "aifab.ops.schedule_targets:submit_job_file",
        "policy": "aifab.ops.schedule_targets:run_policy_target",
    },
)
LEASE_S = 60.0


def _dict(row: ScheduleRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "cron": row.cron,
        "kind": row.target_kind,
        "target": row.target,
        "paused": row.paused,
        "next_at": row.next_at,
        "running": row.lease_until is not None and row.lease_until > time.time(),
        "created_by": row.created_by,
        "created_at": row.created_at,
    }


def _check_target(kind: str, target: str) -> str:
    if kind not in TARGETS:
        raise InvalidInputError(
            f"schedule target kind {kind!r}: use pipeline, monitor, job or policy"
        )
    if kind in ("pipeline", "job"):
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise InvalidInputError(f"--{kind} {target}: no such file")
        return str(path)
    if kind == "policy":
        from aifab.ops.policy.service import get_policy

        get_policy(target)  # NotFoundError names the policies there are
        return target
    from aifab.ops.monitors import get_monitor

    get_monitor(target)  # NotFoundError names the monitors there are
    return target


def create_schedule(name: str, cron: str, kind: str, target: str) -> dict[str, Any]:
    """Run ``target`` (a pipeline file, a monitor name or a job spec file) on ``cron``.

    Raises:
        InvalidInputError: a bad name, cron expression or target; ConflictError: name taken.
    """
    if not is_full_match(SHORT_NAME, name):
        raise InvalidInputError(f"schedule name {name!r}: use letters, digits, '_', '-', '.'")
    expr = check_cron(cron)
    target = _check_target(kind, target)
    now = time.time()
    with session_scope() as s:
        if s.get(ScheduleRow, name) is not None:
            raise ConflictError(f"schedule {name!r} exists")
        row = ScheduleRow(
            name=name,
            cron=expr,
            target_kind=kind,
            target=target,
            paused=False,
            next_at=next_after(expr, now),
            created_by=current_actor(),
            created_at=now,
        )
        s.add(row)
        record_event(s, "schedule.create", f"schedule:{name}", {"cron": expr, kind: target})
        return _dict(row)


def _get(s: Any, name: str) -> ScheduleRow:
    row = s.get(ScheduleRow, name)
    if row is None:
        have = ", ".join(s.scalars(select(ScheduleRow.name).order_by(ScheduleRow.name)))
        raise NotFoundError(f"no schedule {name!r} (schedules: {have or 'none'})")
    return row


def list_schedules() -> list[dict[str, Any]]:
    """Every schedule, by name."""
    with session_scope(readonly=True) as s:
        return [_dict(r) for r in s.scalars(select(ScheduleRow).order_by(ScheduleRow.name))]


def set_paused(name: str, paused: bool) -> dict[str, Any]:
    """Pause or resume a schedule; resuming does not run what came due while paused."""
    with session_scope() as s:
        row = _get(s, name)
        if row.paused != paused:
            row.paused = paused
            if not paused:
                row.next_at = next_after(row.cron, time.time())
            action = "schedule.pause" if paused else "schedule.resume"
            record_event(s, action, f"schedule:{name}", {})
        return _dict(row)


def delete_schedule(name: str) -> None:
    """Delete a schedule (its runs stay in the history)."""
    with session_scope() as s:
        row = _get(s, name)
        record_event(s, "schedule.delete", f"schedule:{name}", {"cron": row.cron})
        s.delete(row)


def schedule_runs(name: str, limit: int = 50) -> list[dict[str, Any]]:
    """A schedule's runs, newest first."""
    with session_scope(readonly=True) as s:
        _get(s, name)
        q = (
            select(ScheduleRunRow)
            .where(ScheduleRunRow.schedule == name)
            .order_by(ScheduleRunRow.id.desc())
            .limit(limit)
        )
        return [
            {
                "id": r.id,
                "schedule": r.schedule,
                "due_at": r.due_at,
                "started_at": r.started_at,
                "finished_at": r.finished_at,
                "status": r.status,
                "detail": r.detail,
            }
            for r in s.scalars(q)
        ]


def _claim(name: str, owner: str, now: float) -> bool:
    """Take the schedule's lease if it is due and nobody holds it (atomic)."""
    with session_scope() as s:
        res = s.execute(
            update(ScheduleRow)
            .where(
                ScheduleRow.name == name,
                ScheduleRow.paused.is_(False),
                ScheduleRow.next_at <= now,
                or_(ScheduleRow.lease_until.is_(None), ScheduleRow.lease_until < now),
            )
            .values(lease_owner=owner, lease_until=now + LEASE_S)
        )
        return bool(res.rowcount)  # type: ignore[attr-defined]


def _renew(name: str, owner: str, done: threading.Event) -> None:
    while not done.wait(LEASE_S / 3):
        with session_scope() as s:
            s.execute(
                update(ScheduleRow)
                .where(and_(ScheduleRow.name == name, ScheduleRow.lease_owner == owner))
                .values(lease_until=time.time() + LEASE_S)
            )


def _run_one(row: dict[str, Any], owner: str, now: float) -> dict[str, Any]:
    name, due = row["name"], row["next_at"]
    next_at, missed = advance(row["cron"], due, now)
    with session_scope() as s:
        run = ScheduleRunRow(
            schedule=name,
            due_at=due,
            started_at=time.time(),
            status="running",
            detail={"missed": missed} if missed else {},
        )
        s.add(run)
        s.flush()
        run_id = run.id
    done = threading.Event()
    renewer = threading.Thread(target=_renew, args=(name, owner, done), daemon=True)
    renewer.start()
    detail: dict[str, Any] = {"missed": missed} if missed else {}
    try:
        with acting_as(f"schedule:{name}"):
            detail["result"] = TARGETS.get(row["kind"])(row["target"])
        status = "succeeded"
    except Exception as exc:  # noqa: BLE001 - one failing schedule must not stop the others
        log.exception("schedule %s failed", name)
        status, detail["error"] = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        done.set()
    with session_scope() as s:
        r = s.get(ScheduleRunRow, run_id)
        assert r is not None
        r.status, r.finished_at, r.detail = status, time.time(), detail
        sched = s.get(ScheduleRow, name, with_for_update=True)  # vs. a claim after expiry
        if sched is not None and sched.lease_owner == owner:
            sched.next_at, sched.lease_owner, sched.lease_until = next_at, None, None
    return {"schedule": name, "status": status, **detail}


def run_due(owner: str, now: float | None = None) -> list[dict[str, Any]]:
    """Run every schedule due at ``now`` whose lease this caller wins, one after another.

    Called by the worker loop; also usable alone (``aifab schedule tick``).

    Returns:
        What each run did (``status``, ``result`` or ``error``, ``missed`` runs skipped).
    """
    now = time.time() if now is None else now
    with session_scope(readonly=True) as s:
        due = [
            _dict(r)
            for r in s.scalars(
                select(ScheduleRow).where(ScheduleRow.paused.is_(False), ScheduleRow.next_at <= now)
            )
        ]
    out = []
    for row in due:
        if _claim(row["name"], owner, now):
            out.append(_run_one(row, owner, now))
    return out
