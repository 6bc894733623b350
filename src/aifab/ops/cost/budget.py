"""Team budgets: set and list them, where each team stands, and the two places they stop work.

``check_job_budget`` runs at job submit (registered by name in ``aifab.jobs.admission``);
:class:`BudgetGate` answers the gateway from per-team flags it refreshes in the background, so
a request never waits on the ledger.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from sqlalchemy import column, func, select, table

from aifab.core.actor import current_actor
from aifab.core.audit import record_event
from aifab.core.db import session_scope
from aifab.core.errors import BudgetExceededError, InvalidInputError, NotFoundError
from aifab.core.names import TEAM, is_full_match
from aifab.ops.cost.budget_policy import PERIODS, BudgetStatus, evaluate
from aifab.ops.cost.ledger import collect
from aifab.ops.cost.tables import BudgetRow, CostEntryRow

__all__ = [
    "BudgetGate",
    "budget_status",
    "check_job_budget",
    "delete_budget",
    "list_budgets",
    "set_budget",
]

log = logging.getLogger("aifab.ops.cost.budget")
_KEYS = table("api_keys", column("id"), column("team"))


def _record(row: BudgetRow) -> dict[str, Any]:
    return {
        "team": row.team,
        "amount": row.amount,
        "period": row.period,
        "alert_at": row.alert_at,
        "created_by": row.created_by,
        "updated_at": row.updated_at,
    }


def set_budget(
    team: str, amount: float, *, period: str = "month", alert_at: float = 0.8
) -> dict[str, Any]:
    """Create or replace a team's budget.

    Args:
        team: the team (as on keys and jobs).
        amount: what it may spend per period, in the prices' currency (> 0).
        period: ``day``, ``week`` or ``month`` (calendar, UTC).
        alert_at: share of the amount at which its status turns ``alert`` (0 < x <= 1).

    Raises:
        InvalidInputError: a bad team name, amount, period or share.
    """
    if not is_full_match(TEAM, team):
        raise InvalidInputError(f"team {team!r}: 1-100 letters, digits, '.', '_' or '-'")
    if not (amount > 0 and amount != float("inf")):
        raise InvalidInputError(f"amount: must be a positive number, got {amount}")
    if period not in PERIODS:
        raise InvalidInputError(f"period {period!r}: use one of {', '.join(PERIODS)}")
    if not 0 < alert_at <= 1:
        raise InvalidInputError(f"alert-at: a share between 0 and 1, got {alert_at}")
    with session_scope() as s:
        row = s.get(BudgetRow, team) or BudgetRow(team=team)
        row.amount, row.period, row.alert_at = float(amount), period, float(alert_at)
        row.created_by, row.updated_at = current_actor(), time.time()
        s.add(row)
        s.flush()
        record_event(s, "budget.set", f"budget:{team}", _record(row))
        return _record(row)


def delete_budget(team: str) -> None:
    """Remove a team's budget (its usage stays in the ledger).

    Raises:
        NotFoundError: the team has no budget.
    """
    with session_scope() as s:
        row = s.get(BudgetRow, team)
        if row is None:
            raise NotFoundError(f"team {team!r} has no budget (see 'aifab budget list')")
        s.delete(row)
        record_event(s, "budget.delete", f"budget:{team}")


def list_budgets() -> list[dict[str, Any]]:
    """Every budget, by team."""
    with session_scope(readonly=True) as s:
        return [_record(r) for r in s.scalars(select(BudgetRow).order_by(BudgetRow.team))]


def _statuses(team: str | None, now: float) -> list[BudgetStatus]:
    with session_scope(readonly=True) as s:
        q = select(BudgetRow).order_by(BudgetRow.team)
        if team is not None:
            q = q.where(BudgetRow.team == team)
        out = []
        for row in s.scalars(q):
            status = evaluate(_record(row), 0.0, now)
            spent = s.scalar(
                select(func.coalesce(func.sum(CostEntryRow.cost), 0.0)).where(
                    CostEntryRow.team == row.team, CostEntryRow.ts >= status.period_start
                )
            )
            out.append(evaluate(_record(row), float(spent or 0.0), now))
        return out


def budget_status(team: str | None = None, *, refresh: bool = True) -> list[dict[str, Any]]:
    """Where each team with a budget stands in its current period (alert sinks read these).

    Args:
        team: only this team.
        refresh: roll new usage into the ledger first (:func:`aifab.ops.cost.ledger.collect`).

    Returns:
        Records with ``team``, ``amount``, ``period``, ``alert_at``, ``period_start``,
        ``spent``, ``share``, ``state`` (ok | alert | over) and ``message``.
    """
    if refresh:
        collect()
    return [st.to_dict() for st in _statuses(team, time.time())]


def check_job_budget(job: Any) -> None:
    """Refuse a job whose team's budget is spent (an admission check of ``aifab.jobs``).

    Raises:
        BudgetExceededError: naming the team, the budget and what was spent.
    """
    team = getattr(job, "team", None)
    if not team:
        return
    with session_scope(readonly=True) as s:
        if s.get(BudgetRow, team) is None:
            return
    collect()  # the team's newest usage counts before it may start more
    for st in _statuses(team, time.time()):
        if st.state == "over":
            raise BudgetExceededError(f"job refused: budget exceeded: {st.message()}")


class BudgetGate:
    """Per-team "over budget" flags for the gateway, refreshed off the request path.

    Args:
        refresh_s: how old the flags may get; a stale read starts a background refresh and
            answers from the flags it has (the first read refreshes in line).
    """

    def __init__(self, refresh_s: float = 5.0) -> None:
        self.refresh_s = refresh_s
        self._over: dict[str, BudgetStatus] = {}
        self._teams: dict[str, str] = {}
        self._states: dict[str, str] = {}
        self._at = 0.0
        self._lock = threading.Lock()
        self._running = False

    def check(self, key_id: str) -> BudgetStatus | None:
        """The spent budget of the key's team, or None when the key may call."""
        if self._at == 0.0:
            self.refresh()
        elif time.monotonic() - self._at > self.refresh_s:
            self._refresh_in_background()
        team = self._teams.get(key_id)
        return self._over.get(team) if team is not None else None

    def refresh(self) -> None:
        """Roll up new usage and re-read keys' teams and budgets (logs state changes)."""
        try:
            collect()
            statuses = _statuses(None, time.time())
            with session_scope(readonly=True) as s:
                teams = {k: t for k, t in s.execute(select(_KEYS.c.id, _KEYS.c.team)) if t}
        except Exception:  # noqa: BLE001 - a failed refresh keeps the last flags; never a 500
            log.exception("budget refresh failed; keeping the previous flags")
            self._at = time.monotonic()
            return
        for st in statuses:
            if st.state != "ok" and self._states.get(st.team) != st.state:
                log.warning("budget %s: %s", st.state, st.message())
        self._states = {st.team: st.state for st in statuses}
        self._over = {st.team: st for st in statuses if st.state == "over"}
        self._teams = teams
        self._at = time.monotonic()

    def _refresh_in_background(self) -> None:
        with self._lock:
            if self._running:
                return
            self._running = True

        def run() -> None:
            try:
                self.refresh()
            finally:
                self._running = False

        threading.Thread(target=run, name="aifab-budget-refresh", daemon=True).start()
