"""The closed loop's bookkeeping without a model: triggers, cool-downs, failures, history."""

from __future__ import annotations

from typing import Any

from aifab.ops.alert_rules import Breach
from aifab.ops.alerts import process_breaches
from aifab.ops.loop import run_policy
from aifab.ops.policy.service import create_policy, policy_history


def _policy(cooldown_s: float) -> dict[str, Any]:
    return {
        "deployment": "churn",
        "model": "churn",
        "trigger": {"monitor": "m", "rules": ["data_drift"]},
        "retrain": {"recipe": "classify", "config": {"dataset": "no_such_data", "label": "y"}},
        "cooldown_s": cooldown_s,
    }


def test_first_run_is_not_held_back_by_its_own_cooldown() -> None:
    """Regression: the run's own history row counted as 'the last retraining'."""
    create_policy("p", _policy(cooldown_s=3600))
    process_breaches("m", "churn", [Breach("data_drift", 1, 1, "warning", "x")], [])
    out = run_policy("p")
    assert out["outcome"] == "failed", out  # it tried: the dataset does not exist
    assert "no_such_data" in out["why"]
    again = run_policy("p")
    assert again["outcome"] == "skipped" and "cool-down" in again["why"]
    assert [r["outcome"] for r in policy_history("p")] == ["skipped", "failed"]


def test_no_alert_no_retraining() -> None:
    create_policy("q", _policy(cooldown_s=0))
    out = run_policy("q")
    assert out["outcome"] == "skipped" and "no firing alert" in out["why"]
    assert [s["step"] for s in out["steps"]] == ["trigger"]


def test_failed_retraining_fires_one_alert_to_the_sinks(caplog) -> None:
    import logging

    from aifab.ops.alerts import alert_history, list_alerts

    create_policy("r", _policy(cooldown_s=0))  # its config names a dataset that does not exist
    process_breaches("m", "churn", [Breach("data_drift", 1, 1, "warning", "x")], [])
    with caplog.at_level(logging.WARNING, logger="aifab.ops.alerts"):
        out = run_policy("r")
    assert out["outcome"] == "failed" and [s["step"] for s in out["steps"]] == [
        "trigger",
        "alert",
    ]
    [alert] = [a for a in list_alerts("firing") if a["monitor"] == "policy:r"]
    assert alert["rule"] == "retrain_failed" and alert["severity"] == "critical"
    assert "no_such_data" in alert["message"]
    logged = [r.getMessage() for r in caplog.records if "retrain_failed" in r.getMessage()]
    assert len(logged) == 1 and "policy:r" in logged[0]  # no monitor 'm' spec: the log sink
    run_policy("r")  # the same failure again folds into the firing alert
    assert len([a for a in list_alerts("firing") if a["monitor"] == "policy:r"]) == 1
    events = [e["event"] for e in alert_history(alert["id"])]
    assert events.count("delivered") == 1 and "repeated" in events


def test_cli_names_how_to_force_a_skipped_run(cli) -> None:
    create_policy("q", _policy(cooldown_s=0))
    r = cli("policy", "run", "q")
    assert r.exit_code == 0, r.stderr
    assert "no firing alert" in r.stdout
    assert "hint: `aifab policy run q --force` retrains now anyway" in r.stdout
