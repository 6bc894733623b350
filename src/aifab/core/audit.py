"""The audit primitive: an append-only, hash-chained log of every mutating service call.

Each event stores the previous event's hash. Appending takes the chain's lock
(:func:`~aifab.core.db.lock_aggregate`, held to the caller's commit, so appends come last in a
transaction); ``prev_hash`` is also unique, so two writers can never both take a chain
position. Event hashes are HMACs under a key kept outside the DB (:mod:`aifab.core.audit_keys`),
so a DB writer cannot recompute them after an edit; events from before keying keep their
unkeyed SHA-256 and must form the chain's prefix.
Every :data:`ANCHOR_EVERY` events (and on ``aifab audit anchor``) the head is appended to an
anchor file; :func:`verify_chain` checks links, hashes, the head record and every anchor.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Float, Index, Integer, String, event, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Mapped, Session, mapped_column

from aifab.core.actor import current_actor
from aifab.core.audit_keys import (
    AuditKey,
    anchors_exist,
    append_anchor,
    load_key,
    make_anchor,
    read_anchors,
    read_own_anchors,
)
from aifab.core.db import Base, lock_aggregate, session_scope
from aifab.core.ids import canonical_json, digest

GENESIS = "0" * 64
#: Above every character: ``prefix <= x < prefix + _LAST_CHAR`` is "x starts with prefix".
_LAST_CHAR = "\U0010ffff"
#: Append an anchor whenever the chain length is a multiple of this.
ANCHOR_EVERY = 100
#: The rows of ``audit_head``: the head, and the record of the chain's keying.
HEAD, KEYING = 1, 2


class AuditEvent(Base):
    """One audit event."""

    __tablename__ = "audit_events"
    # The dashboard filters by actor (newest first) and by time over long logs.
    __table_args__ = (
        Index("ix_audit_events_actor_id", "actor", "id"),
        Index("ix_audit_events_ts", "ts"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ts: Mapped[float] = mapped_column(Float, nullable=False)
    actor: Mapped[str] = mapped_column(String(200), nullable=False)
    action: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    object: Mapped[str] = mapped_column(String(500), nullable=False, index=True)
    params_digest: Mapped[str] = mapped_column(String(64), nullable=False)
    prev_hash: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    hash: Mapped[str] = mapped_column(String(64), nullable=False)


class AuditHead(Base):
    """The chain's head (count and last hash), so deleting the newest rows is detected too.

    Row :data:`HEAD` is the head. Row :data:`KEYING` records that the chain was keyed: ``count``
    is how many unkeyed events precede the keyed ones and ``hash`` the key's fingerprint (a MAC,
    which tells nothing of the key), so a workspace whose key file goes missing, or whose events
    are wiped, does not verify as a fresh one.
    """

    __tablename__ = "audit_head"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    count: Mapped[int] = mapped_column(Integer, nullable=False)
    hash: Mapped[str] = mapped_column(String(64), nullable=False)


def _event_hash(
    key: AuditKey | None, prev_hash: str, ts: float, actor: str, action: str, obj: str, pd: str
) -> str:
    """HMAC-SHA256 of the event under ``key``; plain SHA-256 (pre-keying events) without one."""
    payload = canonical_json([prev_hash, repr(ts), actor, action, obj, pd]).encode("utf-8")
    if key is None:
        return hashlib.sha256(payload).hexdigest()
    return hmac.new(key.secret, payload, hashlib.sha256).hexdigest()


def _fingerprint(key: AuditKey) -> str:
    """What identifies ``key`` without revealing it: a MAC of a fixed label."""
    return hmac.new(key.secret, b"aifab audit key fingerprint", hashlib.sha256).hexdigest()


def _check_keying(session: Session, key: AuditKey | None, events: int) -> list[str]:
    """A keyed chain needs its key, and keeps at least one keyed event."""
    keying = session.get(AuditHead, KEYING)
    if keying is None:
        return []
    problems = []
    if key is None:
        problems.append(
            f"the log was keyed from event #{keying.count + 1} on but its audit key is missing "
            "(audit.key deleted or AIFAB_AUDIT_KEY unset)"
        )
    elif not hmac.compare_digest(keying.hash, _fingerprint(key)):
        problems.append("the audit key is not the one the log was keyed with")
    if events <= keying.count:
        problems.append(
            f"the log was keyed after event #{keying.count} but holds {events} events (wiped)"
        )
    return problems


def _unkeyed_prefix(session: Session) -> int:
    """How many events at the start of the chain carry unkeyed hashes (counted once)."""
    n = 0
    for ev in session.scalars(select(AuditEvent).order_by(AuditEvent.id)):
        if ev.hash != _event_hash(
            None, ev.prev_hash, ev.ts, ev.actor, ev.action, ev.object, ev.params_digest
        ):
            break
        n += 1
    return n


def write_anchor(path: Path | None = None) -> dict[str, Any]:
    """Append the current head (count, hash) as a MAC'd anchor; also to ``path`` if given.

    Returns:
        The anchor written (``count``, ``hash``, ``unkeyed``, ``ts``, ``mac``).
    """
    with session_scope(readonly=True) as s:
        head = s.get(AuditHead, HEAD)
        count, head_hash = (head.count, head.hash) if head else (0, GENESIS)
        key = load_key(create_with_unkeyed=count)
        assert key is not None
        unkeyed = key.unkeyed
        if unkeyed is None:  # a configured key: the boundary lives in the anchors
            anchors, _, _ = read_own_anchors(key)
            newest = max(anchors, key=lambda a: a["count"], default=None)
            unkeyed = newest["unkeyed"] if newest else _unkeyed_prefix(s)
    anchor = make_anchor(key, count, head_hash, unkeyed)
    append_anchor(anchor)
    if path is not None:
        append_anchor(anchor, path)
    return anchor


def _anchor_after_commit(session: Session) -> None:
    event.listen(session, "after_commit", lambda _s: write_anchor(), once=True)


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
    lock_aggregate(session, "audit", "chain")
    # Re-read after the lock: the head another writer committed while this one waited.
    head = session.get(AuditHead, HEAD, populate_existing=True)
    prev = head.hash if head else GENESIS
    key = load_key(create_with_unkeyed=head.count if head else 0)
    ts = time.time()
    actor = current_actor()
    pd = digest(params or {})
    ev = AuditEvent(
        ts=ts,
        actor=actor,
        action=action,
        object=obj,
        params_digest=pd,
        prev_hash=prev,
        hash=_event_hash(key, prev, ts, actor, action, obj, pd),
    )
    session.add(ev)
    if key is not None and session.get(AuditHead, KEYING) is None:
        unkeyed = key.unkeyed if key.unkeyed is not None else (head.count if head else 0)
        session.add(AuditHead(id=KEYING, count=unkeyed, hash=_fingerprint(key)))
    if head is None:
        head = AuditHead(id=HEAD, count=1, hash=ev.hash)
        session.add(head)
    else:
        head.count += 1
        head.hash = ev.hash
    session.flush()
    if head.count % ANCHOR_EVERY == 0 or not anchors_exist():
        _anchor_after_commit(session)
    return ev


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


def _check_event(
    ev: AuditEvent, key: AuditKey | None, position: int, unkeyed: int, prev: str
) -> list[str]:
    problems = []
    if ev.prev_hash != prev:
        problems.append(f"event {ev.id}: chain broken (an earlier event was deleted or edited)")
    fields = (ev.prev_hash, ev.ts, ev.actor, ev.action, ev.object, ev.params_digest)
    if key is not None and hmac.compare_digest(ev.hash, _event_hash(key, *fields)):
        return problems
    if ev.hash != _event_hash(None, *fields):
        problems.append(f"event {ev.id}: contents do not match its hash (edited)")
    elif key is not None and position > unkeyed:
        problems.append(
            f"event {ev.id}: hash is not keyed but the chain is keyed from event "
            f"#{unkeyed + 1} on (rewritten by someone without the key)"
        )
    return problems


def _check_anchors(
    key: AuditKey | None, hashes: list[str], paths: list[Path], keyed_events: bool
) -> tuple[int | None, list[str]]:
    """Every valid anchor's event must still be there with the anchored hash."""
    found, problems, where = read_own_anchors(key)
    for path in paths:
        anchors, bad = read_anchors(key, path)
        problems += bad
        found += anchors
    for a in found:
        n = int(a["count"])
        if n > len(hashes) or (n and hashes[n - 1] != a["hash"]):
            problems.append(
                f"anchor of {n} events ({a['hash'][:12]}) no longer matches the chain of "
                f"{len(hashes)} events (events deleted or rewritten)"
            )
    if not found and (keyed_events or (key is not None and key.unkeyed is not None)):
        # A key file is only made with an anchor following: without one, it was removed.
        names = ", ".join([where, *(p.name for p in paths)])
        wiped = "" if hashes else "; the log is empty: wiped, not new"
        problems.append(f"no anchor found in {names} (anchor file removed or emptied{wiped})")
    newest = max(found, key=lambda a: a["count"]) if found else None
    return (int(newest["unkeyed"]) if newest else None), problems


def verify_chain(session: Session, anchors: Path | None = None) -> ChainReport:
    """Recompute the chain; report edited, reordered, inserted or deleted events.

    Args:
        session: an open session on the metadata DB.
        anchors: another anchor file to check against (an exported copy), besides the
            workspace's own.
    """
    key = load_key()
    paths = [anchors] if anchors is not None else []
    events = list(session.scalars(select(AuditEvent).order_by(AuditEvent.id)))
    hashes = [ev.hash for ev in events]
    keyed_events = len(events) > (key.unkeyed or 0) if key is not None else False
    anchored_unkeyed, problems = _check_anchors(key, hashes, paths, keyed_events)
    unkeyed = key.unkeyed if key is not None and key.unkeyed is not None else anchored_unkeyed
    if key is not None and key.unkeyed is not None and anchored_unkeyed not in (None, key.unkeyed):
        problems.append("anchors and key file disagree on where the keyed chain starts")
    prev = GENESIS
    for position, ev in enumerate(events, start=1):
        problems += _check_event(ev, key, position, unkeyed or 0, prev)
        prev = ev.hash
    problems += _check_keying(session, key, len(events))
    head = session.get(AuditHead, HEAD)
    n = len(events)
    if head is None and n:
        problems.append("audit head missing")
    elif head is not None:
        if head.count != n:
            problems.append(f"head counts {head.count} events but {n} are stored (rows deleted)")
        if head.hash != prev:
            problems.append("head hash does not match the last event (newest events removed)")
    return ChainReport(ok=not problems, events=n, problems=problems)


def _starts(column: Any, prefix: str, binary: bool) -> Any:
    """``column`` starts with ``prefix``, case-sensitively.

    SQLite compares text bytewise, so a range serves it from the column's index (its LIKE
    cannot use one and ignores case); other databases compare by collation: LIKE there.
    """
    if binary:
        return (column >= prefix) & (column < prefix + _LAST_CHAR)
    return column.startswith(prefix, autoescape=True)


def list_events(
    session: Session,
    limit: int = 50,
    action: str | None = None,
    *,
    obj: str | None = None,
    actor: str | None = None,
    since: float | None = None,
    until: float | None = None,
    offset: int = 0,
    before: int | None = None,
    after: int | None = None,
) -> list[AuditEvent]:
    """Newest events first, filtered by action and object prefix, exact actor and time.

    Pages of a long log: ``before``/``after`` keep events with a smaller/larger id (keyset
    pages, as cheap deep in the log as at its head; ``after`` returns the oldest such events,
    still newest first), ``offset`` skips that many of the newest matching events.
    """
    if after is not None:
        q = select(AuditEvent).where(AuditEvent.id > after).order_by(AuditEvent.id.asc())
    else:
        q = select(AuditEvent).order_by(AuditEvent.id.desc())
    q = q.limit(limit).offset(max(0, offset))
    if before is not None:
        q = q.where(AuditEvent.id < before)
    binary = session.get_bind().dialect.name == "sqlite"
    if action:
        q = q.where(_starts(AuditEvent.action, action, binary))
    if obj:
        q = q.where(_starts(AuditEvent.object, obj, binary))
    if actor:
        q = q.where(AuditEvent.actor == actor)
    if since is not None:
        q = q.where(AuditEvent.ts >= since)
    if until is not None:
        q = q.where(AuditEvent.ts < until)
    found = list(session.scalars(q))
    return found[::-1] if after is not None else found
