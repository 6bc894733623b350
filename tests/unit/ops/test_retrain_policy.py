"""The closed loop's pure decisions: trigger, cool-down, gate, canary, no promotion unless gated."""

from __future__ import annotations

from aifab.ops.policy.retrain import (
    GateResult,
    Quality,
    canary_decision,
    gate,
    may_promote,
    trigger,
)

A = {"state": "firing", "rule": "data_drift", "silenced": False}


def test_trigger_needs_a_live_alert_of_a_listed_rule_and_respects_cooldown() -> None:
    rules = ["data_drift", "quality"]
    assert trigger([A], rules, last_started_at=None, cooldown_s=60, now=1000)[0] is True
    assert (
        trigger([{**A, "silenced": True}], rules, last_started_at=None, cooldown_s=0, now=1)[1]
        == "only silenced alerts"
    )
    assert (
        trigger([{**A, "rule": "latency"}], rules, last_started_at=None, cooldown_s=0, now=1)[0]
        is False
    )
    ok, why = trigger([A], rules, last_started_at=990, cooldown_s=60, now=1000)
    assert not ok and why.startswith("cool-down") and "50 s left" in why
    assert trigger([A], rules, last_started_at=900, cooldown_s=60, now=1000)[0] is True


def test_gate_checks_accuracy_fairness_and_latency() -> None:
    cand = {"accuracy": 0.80, "demographic_parity_difference": 0.1, "latency_p99_ms": 4.0}
    g = gate(
        {"accuracy": 0.81},
        cand,
        tolerance=0.02,
        fairness={"demographic_parity_difference": 0.2},
        latency_p99_ms=5,
    )
    assert g.passed and [c.name for c in g.checks] == [
        "accuracy",
        "demographic_parity_difference",
        "latency_p99_ms",
    ]
    assert not gate({"accuracy": 0.85}, cand, tolerance=0.02).passed
    assert not gate(
        None, cand, tolerance=0, fairness={"equalized_odds_difference": 0.1}
    ).passed  # not measured
    assert not gate(None, cand, tolerance=0, latency_p99_ms=3).passed
    assert gate(None, cand, tolerance=0).passed  # no champion: bounds only
    assert not gate({"accuracy": 0.5}, {}, tolerance=1).passed  # candidate not evaluated


def test_no_promotion_without_a_passed_gate() -> None:
    assert may_promote(None) is False
    assert may_promote(GateResult(())) is False  # no checks is not a pass
    assert may_promote(gate(None, {"accuracy": 0.5}, tolerance=0)) is True


def test_canary_decisions() -> None:
    kw = {"window_s": 60, "min_requests": 20, "max_error_rate": 0.05, "max_wait_s": 300}
    assert canary_decision(requests=5, errors=0, elapsed_s=10, **kw)[0] == "wait"
    assert canary_decision(requests=30, errors=10, elapsed_s=10, **kw)[0] == "rollback"  # early
    assert canary_decision(requests=30, errors=1, elapsed_s=61, **kw)[0] == "promote"
    assert canary_decision(requests=5, errors=0, elapsed_s=100, **kw)[0] == "wait"
    d, why = canary_decision(requests=5, errors=0, elapsed_s=301, **kw)
    assert d == "rollback" and "only 5 canary requests" in why


def test_gate_judges_recent_labelled_traffic_like_the_holdout() -> None:
    cand = {"accuracy": 0.80}
    ok = gate(
        {"accuracy": 0.80}, cand, tolerance=0.02, traffic=({"accuracy": 0.7}, {"accuracy": 0.69})
    )
    assert ok.passed and [c.name for c in ok.checks] == ["accuracy", "accuracy_recent_traffic"]
    worse = gate(
        {"accuracy": 0.80}, cand, tolerance=0.02, traffic=({"accuracy": 0.9}, {"accuracy": 0.8})
    )
    assert not worse.passed
    [failed] = [c for c in worse.checks if not c.passed]
    assert failed.name == "accuracy_recent_traffic" and "champion 0.9000" in failed.detail
    # the candidate could not be scored on the logged rows: it does not pass
    assert not gate(None, cand, tolerance=1, traffic=(None, {"error": 1.0})).passed
    # not enough labels (None): only the hold-out is judged
    assert [c.name for c in gate(None, cand, tolerance=0, traffic=None).checks] == ["accuracy"]


def test_canary_rolled_back_on_labelled_quality_only_with_enough_labels() -> None:
    kw = {"window_s": 60, "min_requests": 20, "max_error_rate": 0.05, "max_wait_s": 300}

    def q(canary: float, n: int, primary: float | None = 0.9, m: int = 50) -> Quality:
        return Quality(canary, n, primary, m, min_labels=20, tolerance=0.05)

    d, why = canary_decision(requests=30, errors=0, elapsed_s=10, quality=q(0.80, 25), **kw)
    assert d == "rollback" and why.startswith("canary accuracy 0.800 over 25 labels < primary")
    assert (
        canary_decision(requests=30, errors=0, elapsed_s=10, quality=q(0.80, 19), **kw)[0] == "wait"
    )
    assert (
        canary_decision(requests=30, errors=0, elapsed_s=10, quality=q(0.2, 25, m=10), **kw)[0]
        == "wait"
    )
    assert (
        canary_decision(requests=30, errors=0, elapsed_s=61, quality=q(0.86, 25), **kw)[0]
        == "promote"
    )
    no_labels = q(0.0, 0, None, 0)
    assert canary_decision(requests=30, errors=0, elapsed_s=61, quality=no_labels, **kw)[0] == (
        "promote"
    )
