"""The alert store: apply a rule evaluation, notify the sinks once per group, keep the history.

Firing, folding repeats, resolving and muting follow :func:`aifab.ops.alert_rules.plan`.
Silences and listings serve the CLI and the HTTP API.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from aifab.core.actor import current_actor
from aifab.core.audit import record_event
from aifab.core.db import lock_aggregate, session_scope
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.ops.alert_rules import DEFAULT_REPEAT_INTERVAL_S, Breach, Silence, fingerprint, plan
from aifab.ops.sinks import SINKS
from aifab.ops.tables import AlertEventRow, AlertRow, MonitorRow, SilenceRow

__all__ = ["alert_history", "list_alerts", "list_silences", "process_breaches", "silence_alerts"]


#: Alert events that mean "the sinks were told it fires".
_NOTICES = ("fired", "renotified")


def _alert(row: AlertRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "rule": row.rule,
        "monitor": row.monitor,
        "group": row.group,
        "severity": row.severity,
        "state": row.state,
        "message": row.message,
        "value": row.value,
        "count": row.count,
        "silenced": row.silenced,
        "first_at": row.first_at,
        "last_at": row.last_at,
        "resolved_at": row.resolved_at,
    }


def _event(s: Session, alert_id: int, kind: str, detail: Mapping[str, Any], now: float) -> None:
    s.add(AlertEventRow(alert_id=alert_id, ts=now, kind=kind, detail=dict(detail)))


def _silences(s: Session, now: float) -> list[Silence]:
    rows = s.scalars(select(SilenceRow).where(SilenceRow.until > now))
    return [Silence(r.rule, r.monitor, r.until) for r in rows]


def _repeat_after(s: Session, monitor: str, rules: Sequence[str]) -> dict[str, float | None]:
    """Rule -> its repeat interval: the monitor's spec, else the default (policy alerts)."""
    row = s.get(MonitorRow, monitor)
    spec = row.spec if row is not None else {}
    default = spec.get("repeat_interval_s", DEFAULT_REPEAT_INTERVAL_S)
    per_rule = spec.get("repeat_intervals") or {}
    return {rule: per_rule.get(rule, default) for rule in rules}


def _last_sent(s: Session, rows: Sequence[AlertRow]) -> dict[str, float]:
    """Fingerprint -> when each firing alert was last notified (fired or re-sent)."""
    by_id = {r.id: r.fingerprint for r in rows}
    if not by_id:
        return {}
    q = (
        select(AlertEventRow.alert_id, func.max(AlertEventRow.ts))
        .where(AlertEventRow.alert_id.in_(by_id), AlertEventRow.kind.in_(_NOTICES))
        .group_by(AlertEventRow.alert_id)
    )
    return {by_id[alert_id]: float(ts) for alert_id, ts in s.execute(q)}


def _apply(
    s: Session, monitor: str, group: str, breaches: Sequence[Breach], judged: Sequence[str] | None
) -> list[tuple[AlertRow, bool]]:
    """Store one evaluation; return the rows to notify (``True``: a re-sent firing alert)."""
    now = time.time()
    open_rows = {
        r.fingerprint: r
        for r in s.scalars(
            select(AlertRow).where(AlertRow.monitor == monitor, AlertRow.state == "firing")
        )
    }
    p = plan(
        monitor,
        breaches,
        {fp: r.rule for fp, r in open_rows.items()},
        _silences(s, now),
        now,
        judged=judged,
        last_sent=_last_sent(s, list(open_rows.values())),
        repeat_after=_repeat_after(s, monitor, [b.rule for b in breaches]),
    )
    changed: list[tuple[AlertRow, bool]] = []
    for b, muted in p.fire:
        row = AlertRow(
            fingerprint=fingerprint(b.rule, monitor),
            rule=b.rule,
            monitor=monitor,
            group=group,
            severity=b.severity,
            state="firing",
            message=b.message,
            value=b.value,
            count=1,
            silenced=muted,
            first_at=now,
            last_at=now,
        )
        s.add(row)
        s.flush()
        _event(s, row.id, "silenced" if muted else "fired", {"message": b.message}, now)
        if not muted:
            changed.append((row, False))
    for fp, b in p.repeat:
        row = open_rows[fp]
        row.count, row.last_at, row.value, row.message = row.count + 1, now, b.value, b.message
        _event(s, row.id, "repeated", {"message": b.message}, now)
    for fp in p.renotify:
        row = open_rows[fp]
        if not row.silenced:
            _event(s, row.id, "renotified", {"message": row.message, "count": row.count}, now)
            changed.append((row, True))
    for fp in p.resolve:
        row = open_rows[fp]
        row.state, row.resolved_at = "resolved", now
        _event(s, row.id, "resolved", {}, now)
        if not row.silenced:
            changed.append((row, False))
    return changed


def process_breaches(
    monitor: str,
    group: str,
    breaches: Sequence[Breach],
    sinks: Sequence[Mapping[str, Any]],
    *,
    judged: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Apply one evaluation of ``monitor``'s rules and notify ``sinks`` of what changed.

    New alerts and resolutions of one evaluation go out as one notification (grouped by the
    deployment); repeats of a firing alert fold into it, and it is sent again (``renotified``)
    once its monitor's ``repeat_interval_s`` (or the rule's own) has passed since its last
    notice; silenced alerts are recorded, not sent.
    Each delivery (or failed delivery, after retries) is an alert-history event.

    Returns:
        The alerts that fired, were re-sent or resolved (and were notified).
    """
    with session_scope() as s:
        lock_aggregate(s, "alerts", monitor)  # one evaluation of a monitor at a time
        changed = [
            {**_alert(r), "renotified": again}
            for r, again in _apply(s, monitor, group, breaches, judged)
        ]
    if changed:
        _notify(group, changed, sinks)
    return changed


def _notify(group: str, alerts: list[dict[str, Any]], sinks: Sequence[Mapping[str, Any]]) -> None:
    payload = {"group": group, "alerts": alerts, "sent_at": time.time()}
    for options in sinks:
        kind = str(options.get("type", "log"))
        try:
            delivery = SINKS.get(kind)().send(payload, options)
            detail = {"sink": kind, "ok": delivery.ok, "attempts": delivery.attempts}
            if delivery.error:
                detail["error"] = delivery.error
        except Exception as exc:  # noqa: BLE001 - a broken sink must not stop the monitor
            detail = {"sink": kind, "ok": False, "attempts": 0, "error": str(exc)}
        kind_event = "delivered" if detail["ok"] else "delivery_failed"
        now = time.time()
        with session_scope() as s:
            for a in alerts:
                _event(s, a["id"], kind_event, detail, now)


def list_alerts(state: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """Alerts, newest first; ``state`` ``firing`` or ``resolved`` filters."""
    if state not in (None, "firing", "resolved"):
        raise InvalidInputError(f"state {state!r}: use firing or resolved")
    q = select(AlertRow).order_by(AlertRow.id.desc()).limit(limit)
    if state:
        q = q.where(AlertRow.state == state)
    with session_scope(readonly=True) as s:
        return [_alert(r) for r in s.scalars(q)]


def alert_history(alert_id: int | None = None, limit: int = 200) -> list[dict[str, Any]]:
    """Alert events (fired, repeated, silenced, resolved, delivered...), newest first."""
    q = select(AlertEventRow, AlertRow).join(AlertRow, AlertRow.id == AlertEventRow.alert_id)
    if alert_id is not None:
        q = q.where(AlertEventRow.alert_id == alert_id)
    q = q.order_by(AlertEventRow.id.desc()).limit(limit)
    with session_scope(readonly=True) as s:
        if alert_id is not None and s.get(AlertRow, alert_id) is None:
            raise NotFoundError(f"no alert {alert_id}")
        return [
            {
                "alert_id": e.alert_id,
                "rule": a.rule,
                "monitor": a.monitor,
                "ts": e.ts,
                "event": e.kind,
                "detail": e.detail,
            }
            for e, a in s.execute(q)
        ]


def silence_alerts(
    *, rule: str | None = None, monitor: str | None = None, duration_s: float, reason: str = ""
) -> dict[str, Any]:
    """Mute alerts of ``rule`` and/or ``monitor`` for ``duration_s`` seconds (audited).

    Firing alerts it matches are marked silenced at once (no resolution notice goes out).

    Raises:
        InvalidInputError: neither rule nor monitor, or a duration that is not positive.
    """
    if rule is None and monitor is None:
        raise InvalidInputError("a silence needs --rule and/or --monitor")
    if duration_s <= 0:
        raise InvalidInputError(f"duration {duration_s:g} s: expected > 0")
    now = time.time()
    with session_scope() as s:
        row = SilenceRow(
            rule=rule,
            monitor=monitor,
            until=now + duration_s,
            reason=reason,
            created_by=current_actor(),
            created_at=now,
        )
        s.add(row)
        s.flush()
        silence = Silence(rule, monitor, row.until)
        for a in s.scalars(select(AlertRow).where(AlertRow.state == "firing")):
            if silence.matches(a.rule, a.monitor, now) and not a.silenced:
                a.silenced = True
                _event(s, a.id, "silenced", {"silence": row.id}, now)
        params = {"rule": rule, "monitor": monitor, "until": row.until, "reason": reason}
        record_event(s, "alerts.silence", f"silence:{row.id}", params)
        return {"id": row.id, **params}


def list_silences(active_only: bool = True) -> list[dict[str, Any]]:
    """Silences (those in force, or all), newest first."""
    q = select(SilenceRow).order_by(SilenceRow.id.desc())
    if active_only:
        q = q.where(SilenceRow.until > time.time())
    with session_scope(readonly=True) as s:
        return [
            {
                "id": r.id,
                "rule": r.rule,
                "monitor": r.monitor,
                "until": r.until,
                "reason": r.reason,
                "created_by": r.created_by,
            }
            for r in s.scalars(q)
        ]
