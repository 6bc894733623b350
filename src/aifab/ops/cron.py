"""Cron arithmetic for schedules, as pure functions (croniter underneath)."""

from __future__ import annotations

from aifab.core.errors import InvalidInputError

__all__ = ["advance", "check_cron", "next_after"]

#: Missed runs counted at most (a schedule down for years must not loop for long).
_MAX_MISSED = 10_000


def check_cron(expr: str) -> str:
    """``expr`` if it is a valid 5-field cron expression, else InvalidInputError naming it."""
    from croniter import croniter

    text = " ".join(str(expr).split())
    if len(text.split(" ")) != 5 or not croniter.is_valid(text):
        raise InvalidInputError(
            f"cron {expr!r}: expected 5 fields 'minute hour day month weekday' (e.g. '0 * * * *')"
        )
    return text


def next_after(expr: str, ts: float) -> float:
    """The first time strictly after ``ts`` that ``expr`` names (UTC)."""
    from croniter import croniter

    return float(croniter(expr, ts).get_next(float))


def advance(expr: str, due_at: float, now: float) -> tuple[float, int]:
    """After running the run due at ``due_at`` at ``now``: the next due time and runs missed.

    Runs due between ``due_at`` and ``now`` (a worker was down) are skipped, not piled up:
    the one run made now stands for them all.
    """
    from croniter import croniter

    it = croniter(expr, due_at)
    missed = 0
    nxt = float(it.get_next(float))
    while nxt <= now and missed < _MAX_MISSED:
        missed += 1
        nxt = float(it.get_next(float))
    if nxt <= now:
        nxt = next_after(expr, now)
    return nxt, missed
