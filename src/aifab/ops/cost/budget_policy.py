"""Budget decisions, pure: a period's window, and where a team stands against its budget.

Tested alone, like ``jobs/policy.py``; ``aifab.ops.cost.budget`` reads the ledger and calls these.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["PERIODS", "BudgetStatus", "evaluate", "period_start"]

PERIODS = ("day", "week", "month")
_ADJECTIVE = {"day": "daily", "week": "weekly", "month": "monthly"}


def period_start(period: str, now: float) -> float:
    """Start (UTC) of the ``day``, ISO ``week`` (Monday) or calendar ``month`` holding ``now``.

    Raises:
        ValueError: an unknown period.
    """
    t = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return t.timestamp()
    if period == "week":
        return (t - timedelta(days=t.weekday())).timestamp()
    if period == "month":
        return t.replace(day=1).timestamp()
    raise ValueError(f"period {period!r}: use one of {', '.join(PERIODS)}")


@dataclass(frozen=True)
class BudgetStatus:
    """A team's spending in its current budget period."""

    team: str
    amount: float
    period: str
    alert_at: float
    period_start: float
    spent: float
    #: ``ok`` | ``alert`` (at or past ``alert_at`` of the amount) | ``over`` (at or past it)
    state: str

    @property
    def share(self) -> float:
        """Spent as a share of the amount."""
        return self.spent / self.amount if self.amount > 0 else float("inf")

    def message(self) -> str:
        """One line naming the budget and the numbers."""
        return (
            f"team {self.team!r} has spent {self.spent:.4f} of its "
            f"{_ADJECTIVE.get(self.period, self.period)} budget "
            f"{self.amount:g} ({self.share:.0%})"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON form, with ``share`` and ``message``."""
        return {**asdict(self), "share": self.share, "message": self.message()}


def evaluate(budget: dict[str, Any], spent: float, now: float) -> BudgetStatus:
    """Where a team stands: ``budget`` holds ``team``, ``amount``, ``period``, ``alert_at``."""
    amount = float(budget["amount"])
    alert_at = float(budget["alert_at"])
    if spent >= amount:
        state = "over"
    elif spent >= alert_at * amount:
        state = "alert"
    else:
        state = "ok"
    return BudgetStatus(
        team=str(budget["team"]),
        amount=amount,
        period=str(budget["period"]),
        alert_at=alert_at,
        period_start=period_start(str(budget["period"]), now),
        spent=spent,
        state=state,
    )
