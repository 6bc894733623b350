"""The audit primitive: an append-only, hash-chained log of every mutating service call.

Each event stores the previous event's hash; ``prev_hash`` is unique, so two writers racing for
the same chain position cannot both win (the loser retries). :func:`verify_chain` recomputes the
chain and a head record, so an edited, inserted or deleted row (the last one included) is found.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Float, Integer, String, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Mapped, Session, mapped_column

from aifab.core.actor import current_actor
from aifab.core.db import Base, session_scope
from aifab.core.ids import canonical_json, digest

GENESIS = "0" * 64


class AuditEvent(Base):
    """One audit event."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ts: Mapped[float] = mapped_column(Float, nullable=False)
    actor: Mapped[str] = mapped_column(String(200), nullable=False)
    action: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    object: Mapped[str] = mapped_column(String(500), nullable=False, index=True)
    params_digest: Mapped[str] = mapped_column(String(64), nullable=False)
    prev_hash: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    hash: Mapped[str] = mapped_column(String(64), nullable=False)


class AuditHead(Base):
    """The chain's head (count and last hash), so deleting the newest rows is detected too."""

    __tablename__ = "audit_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    count: Mapped[int] = mapped_column(Integer, nullable=False)
    hash: Mapped[str] = mapped_column(String(64), nullable=False)


def _event_hash(prev_hash: str, ts: float, actor: str, action: str, obj: str, pd: str) -> str:
    payload = canonical_json([prev_hash, repr(ts), actor, action, obj, pd])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def record_event(
    session: Session, action: str, obj: str, params: dict[str, Any] | None = None
) -> AuditEvent:
    """Append an audit event inside the caller's transaction (so it commits with the change).

    Args:
        session: the open transaction of the mutating service call.
        action: a dotted verb such as ``dataset.ingest``.
        obj: what was acted on, e.g. ``dataset:iris@3``.
        params: the call's parameters; only their digest is stored.
    """
    head = session.get(AuditHead, 1)
    prev = head.hash if head else GENESIS
    ts = time.time()
    actor = current_actor()
    pd = digest(params or {})
    event = AuditEvent(
        ts=ts,
        actor=actor,
        action=action,
        object=obj,
        params_digest=pd,
        prev_hash=prev,
        hash=_event_hash(prev, ts, actor, action, obj, pd),
    )
    session.add(event)
    if head is None:
        session.add(AuditHead(id=1, count=1, hash=event.hash))
    else:
        head.count += 1
        head.hash = event.hash
    session.flush()
    return event


def audited(action: str, obj: str, params: dict[str, Any] | None = None) -> None:
    """Record an event in its own transaction, retrying if another writer took the slot."""
    for attempt in range(20):
        try:
            with session_scope() as s:
                record_event(s, action, obj, params)
            return
        except sa_exc.IntegrityError:
            time.sleep(0.01 * (attempt + 1))
    raise RuntimeError("could not append to the audit log after 20 attempts")


@dataclass
class ChainReport:
    """The outcome of :func:`verify_chain`."""

    ok: bool
    events: int
    problems: list[str] = field(default_factory=list)


def verify_chain(session: Session) -> ChainReport:
    """Recompute the chain; report edited, reordered, inserted or deleted events."""
    problems: list[str] = []
    prev = GENESIS
    n = 0
    for ev in session.scalars(select(AuditEvent).order_by(AuditEvent.id)):
        n += 1
        if ev.prev_hash != prev:
            problems.append(f"event {ev.id}: chain broken (an earlier event was deleted or edited)")
        expected = _event_hash(
            ev.prev_hash, ev.ts, ev.actor, ev.action, ev.object, ev.params_digest
        )
        if ev.hash != expected:
            problems.append(f"event {ev.id}: contents do not match its hash (edited)")
        prev = ev.hash
    head = session.get(AuditHead, 1)
    if head is None and n:
        problems.append("audit head missing")
    elif head is not None:
        if head.count != n:
            problems.append(f"head counts {head.count} events but {n} are stored (rows deleted)")
        if head.hash != prev:
            problems.append("head hash does not match the last event (newest events removed)")
    return ChainReport(ok=not problems, events=n, problems=problems)


def list_events(
    session: Session,
    limit: int = 50,
    action: str | None = None,
    *,
    obj: str | None = None,
    actor: str | None = None,
    since: float | None = None,
    until: float | None = None,
) -> list[AuditEvent]:
    """Newest events first, filtered by action and object prefix, exact actor and time."""
    q = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)
    if action:
        q = q.where(AuditEvent.action.startswith(action, autoescape=True))
    if obj:
        q = q.where(AuditEvent.object.startswith(obj, autoescape=True))
    if actor:
        q = q.where(AuditEvent.actor == actor)
    if since is not None:
        q = q.where(AuditEvent.ts >= since)
    if until is not None:
        q = q.where(AuditEvent.ts < until)
    return list(session.scalars(q))
