"""The cost ledger: roll job accounting and the gateway's request log up into priced entries.

``collect`` reads what is new since its cursors (finished attempts, request-log rows), prices
it with :mod:`aifab.ops.cost.pricing` and appends entries; it sits beside the request path,
never in it. ``cost_report`` groups the ledger by team, project, model, deployment or day.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import column, func, select, table
from sqlalchemy.orm import Session

from aifab.core.audit import record_event
from aifab.core.db import lock_aggregate, session_scope
from aifab.core.errors import InvalidInputError
from aifab.inference.tables import RequestLogRow
from aifab.jobs.tables import AttemptRow, JobRow
from aifab.ops.cost.prices import Prices, load_prices
from aifab.ops.cost.pricing import Entry, day_of, price_attempt, price_traffic
from aifab.ops.cost.tables import CostCursorRow, CostEntryRow

# The gateway's keys table by name: ``ops`` sits below ``serve`` and only reads two columns.
_KEYS = table("api_keys", column("id"), column("team"), column("project"))

__all__ = ["GROUPS", "collect", "cost_report", "parse_since"]

GROUPS = ("team", "project", "model", "deployment", "day", "source")
#: Request-log rows read per roll-up pass (the next call continues from the cursor).
_BATCH = 50_000
_SINCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(h|d|w)\s*$")
_SECONDS = {"h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_SUMS = ("cost", "cpu_hours", "gpu_hours", "memory_gb_hours", "requests", "tokens")


def parse_since(value: str | float | None, *, now: float | None = None) -> float | None:
    """A start time from ``7d``, ``24h``, ``2w``, an ISO date/time (UTC) or epoch seconds.

    Raises:
        InvalidInputError: none of those forms.
    """
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    m = _SINCE.match(value)
    if m:
        return (now if now is not None else time.time()) - float(m.group(1)) * _SECONDS[m.group(2)]
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidInputError(
            f"since {value!r}: use e.g. 24h, 7d, 2w or a date such as 2026-01-31"
        ) from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


def _cursor(session: Session, name: str) -> CostCursorRow:
    row = session.get(CostCursorRow, name)
    if row is None:
        row = CostCursorRow(name=name, value=0)
        session.add(row)
    return row


def _add(session: Session, entries: list[Entry]) -> int:
    """Append entries whose source is not in the ledger yet; return how many were added."""
    if not entries:
        return 0
    keys = [e.source_key for e in entries]
    seen = set(
        session.scalars(select(CostEntryRow.source_key).where(CostEntryRow.source_key.in_(keys)))
    )
    fresh = [e for e in entries if e.source_key not in seen]
    session.add_all(CostEntryRow(**e.to_dict()) for e in fresh)
    return len(fresh)


def _job_entries(session: Session, prices: Prices) -> list[Entry]:
    cursor = _cursor(session, "attempts")
    rows = session.execute(
        select(AttemptRow, JobRow)
        .join(JobRow, JobRow.id == AttemptRow.job_id)
        .where(AttemptRow.id > cursor.value)
        .order_by(AttemptRow.id)
    ).all()
    entries, contiguous = [], True
    for att, job in rows:
        if att.finished_at is None:
            contiguous = False  # the cursor waits for it; later finished ones are priced now
            continue
        if contiguous:
            cursor.value = att.id
        entries.append(
            price_attempt(
                {"id": att.id, "finished_at": att.finished_at, "usage": att.usage},
                {"id": job.id, "team": job.team, "project": job.project, "spec": job.spec},
                prices,
            )
        )
    return entries


def _traffic_entries(session: Session, prices: Prices) -> list[Entry]:
    cursor = _cursor(session, "request_log")
    rows = session.execute(
        select(
            RequestLogRow.id,
            RequestLogRow.ts,
            RequestLogRow.deployment,
            RequestLogRow.model_version,
            RequestLogRow.key_id,
            RequestLogRow.latency_ms,
            RequestLogRow.tokens,
            _KEYS.c.team,
            _KEYS.c.project,
        )
        .outerjoin(_KEYS, _KEYS.c.id == RequestLogRow.key_id)
        .where(RequestLogRow.id > cursor.value)
        .order_by(RequestLogRow.id)
        .limit(_BATCH)
    ).all()
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        key = (day_of(r.ts), r.key_id, r.deployment, r.model_version)
        g = groups.get(key)
        if g is None:
            g = groups[key] = defaultdict(float)
            g.update(first_id=r.id, key_id=r.key_id or "-", deployment=r.deployment)
            g.update(model=r.model_version or "-", team=r.team, project=r.project)
        g["last_id"], g["ts"] = r.id, max(g["ts"], r.ts)
        g["requests"] += 1
        g["tokens"] += r.tokens or 0
        g["compute_ms"] += r.latency_ms or 0.0
    if rows:
        cursor.value = rows[-1].id
    return [price_traffic(g, prices) for g in groups.values()]


def collect() -> dict[str, Any]:
    """Price what is new in job accounting and the request log; append it to the ledger.

    Safe to run at any time and from several processes: cursors and the unique source of
    each entry keep usage from being counted twice.

    Returns:
        ``{"jobs": n, "gateway": n}``: entries added.

    Raises:
        InvalidInputError: a bad ``prices.yaml`` or ``AIFAB_PRICE_*`` value.
    """
    prices = load_prices()
    with session_scope() as s:
        # Collectors take turns, and each waits for in-flight inserts of attempts and request
        # log rows (they hold these locks shared): ids commit out of order on PostgreSQL, and a
        # cursor past an id still uncommitted would never price it.
        lock_aggregate(s, "cost-source", "attempts")
        lock_aggregate(s, "cost-source", "request_log")
        jobs = _add(s, _job_entries(s, prices))
        gateway = _add(s, _traffic_entries(s, prices))
        if jobs or gateway:
            record_event(s, "cost.collect", "cost:ledger", {"jobs": jobs, "gateway": gateway})
    return {"jobs": jobs, "gateway": gateway}


def cost_report(
    by: str = "team",
    *,
    since: str | float | None = None,
    until: str | float | None = None,
    team: str | None = None,
    refresh: bool = True,
) -> dict[str, Any]:
    """Spending grouped by one dimension, largest first.

    Args:
        by: ``team``, ``project``, ``model``, ``deployment``, ``day`` or ``source``.
        since: start (see :func:`parse_since`); default: everything.
        until: end, same forms; default: now.
        team: only this team's entries.
        refresh: run :func:`collect` first, so the report includes the newest usage.

    Returns:
        ``{"by", "currency", "since", "until", "total", "rows": [{<by>, cost, cpu_hours,
        gpu_hours, memory_gb_hours, requests, tokens}]}``.

    Raises:
        InvalidInputError: an unknown grouping or a bad time.
    """
    if by not in GROUPS:
        raise InvalidInputError(f"by {by!r}: use one of {', '.join(GROUPS)}")
    start, end = parse_since(since), parse_since(until)
    if refresh:
        collect()
    group = getattr(CostEntryRow, by)
    q = select(group, *(func.sum(getattr(CostEntryRow, c)) for c in _SUMS)).group_by(group)
    if start is not None:
        q = q.where(CostEntryRow.ts >= start)
    if end is not None:
        q = q.where(CostEntryRow.ts < end)
    if team is not None:
        q = q.where(CostEntryRow.team == team)
    with session_scope(readonly=True) as s:
        rows = [
            {
                by: r[0],
                **{
                    c: (int(v or 0) if c in ("requests", "tokens") else float(v or 0.0))
                    for c, v in zip(_SUMS, r[1:], strict=True)
                },
            }
            for r in s.execute(q)
        ]
    rows.sort(key=lambda r: (r[by] if by == "day" else -r["cost"], str(r[by])))
    return {
        "by": by,
        "currency": load_prices().currency,
        "since": start,
        "until": end,
        "total": sum(r["cost"] for r in rows),
        "rows": rows,
    }
