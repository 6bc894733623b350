"""Pricing and budget decisions, pure: plain records in, entries and states out."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from aifab.ops.cost.budget_policy import evaluate, period_start
from aifab.ops.cost.prices import Prices
from aifab.ops.cost.pricing import UNASSIGNED, price_attempt, price_traffic

PRICES = Prices(cpu_hour=1.0, gpu_hour=10.0, memory_gb_hour=0.5, tokens_1k=2.0, request=0.01)


def _ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_an_attempt_pays_for_what_it_reserved_while_it_ran() -> None:
    job = {
        "id": "job-1",
        "team": "growth",
        "project": "churn",
        "spec": {"resources": {"cpu": 2.0, "memory": 2048.0}, "run": {"config": {"register": "m"}}},
    }
    # Two replicas of 30 min each: wall_s is summed over replicas (one replica-hour).
    attempt = {"id": 7, "finished_at": _ts("2026-03-01T10:00:00"), "usage": {"wall_s": 3600.0}}
    e = price_attempt({**attempt, "usage": {"wall_s": 3600.0, "gpu_s": 1800.0}}, job, PRICES)
    assert (e.cpu_hours, e.memory_gb_hours, e.gpu_hours) == (2.0, 2.0, 0.5)
    assert e.cost == pytest.approx(2.0 * 1.0 + 2.0 * 0.5 + 0.5 * 10.0)
    assert (e.team, e.project, e.model, e.day) == ("growth", "churn", "m", "2026-03-01")
    assert e.source_key == "attempt:7" and e.ref == "job-1"


def test_an_attempt_without_team_or_usage_is_unassigned_and_free() -> None:
    e = price_attempt({"id": 1, "finished_at": 0.0, "usage": {}}, {"id": "j", "spec": {}}, PRICES)
    assert (e.team, e.project, e.model, e.cost) == (UNASSIGNED, UNASSIGNED, UNASSIGNED, 0.0)


def test_traffic_pays_per_token_request_and_compute_time() -> None:
    group = {
        "first_id": 3,
        "last_id": 9,
        "ts": _ts("2026-03-02T23:59:00"),
        "key_id": "key-a",
        "team": "growth",
        "project": None,
        "deployment": "churn",
        "model": "churn@2",
        "requests": 100,
        "tokens": 5000,
        "compute_ms": 1_800_000.0,
    }
    e = price_traffic(group, PRICES)
    assert e.cost == pytest.approx(5 * 2.0 + 100 * 0.01 + 0.5 * 1.0)
    assert (e.project, e.deployment, e.model, e.day) == (
        UNASSIGNED,
        "churn",
        "churn@2",
        "2026-03-02",
    )
    assert e.source_key.startswith("gateway:3-9:key-a:churn")


@pytest.mark.parametrize(
    ("period", "now", "start"),
    [
        ("day", "2026-03-04T15:30:00", "2026-03-04T00:00:00"),
        ("week", "2026-03-04T15:30:00", "2026-03-02T00:00:00"),  # a Wednesday -> Monday
        ("month", "2026-03-04T15:30:00", "2026-03-01T00:00:00"),
        ("month", "2026-03-01T00:00:00", "2026-03-01T00:00:00"),
    ],
)
def test_period_start(period: str, now: str, start: str) -> None:
    assert period_start(period, _ts(now)) == _ts(start)


def test_unknown_period_is_refused() -> None:
    with pytest.raises(ValueError, match="period 'year'"):
        period_start("year", 0.0)


@pytest.mark.parametrize(
    ("spent", "state"),
    [(0.0, "ok"), (79.9, "ok"), (80.0, "alert"), (100.0, "over"), (150.0, "over")],
)
def test_budget_states(spent: float, state: str) -> None:
    budget = {"team": "growth", "amount": 100.0, "period": "month", "alert_at": 0.8}
    st = evaluate(budget, spent, _ts("2026-03-04T00:00:00"))
    assert st.state == state
    assert "team 'growth'" in st.message() and "monthly budget 100" in st.message()
