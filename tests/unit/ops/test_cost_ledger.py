"""The ledger on a real DB: real job attempts and request-log rows rolled up, once each."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aifab.core import audit_events
from aifab.core.errors import InvalidInputError
from aifab.inference.request_log import RequestLogger
from aifab.ops import collect, cost_report, load_prices
from aifab.ops.cost.ledger import parse_since
from aifab.serve.keys import create_key


def _traffic(entries: list[dict[str, Any]]) -> None:
    logger = RequestLogger()
    for e in entries:
        logger.log({"route": "/v1/predict", "status": 200, **e})
    logger.close()


def test_a_finished_job_is_priced_once_with_its_team(
    run_job: Callable[..., dict[str, Any]],
) -> None:
    job = run_job(team="growth", project="churn", resources={"cpu": 2, "memory": "1Gi"})
    assert job["state"] == "succeeded" and job["team"] == "growth"
    assert collect() == {"jobs": 1, "gateway": 0}
    assert collect() == {"jobs": 0, "gateway": 0}  # the cursor and unique source hold
    report = cost_report("team", refresh=False)
    (row,) = report["rows"]
    prices = load_prices()
    wall_h = job["usage"]["wall_s"] / 3600
    assert row["team"] == "growth"
    assert row["cpu_hours"] == pytest.approx(2 * wall_h)
    assert row["memory_gb_hours"] == pytest.approx(1 * wall_h)
    assert row["cost"] == pytest.approx(
        2 * wall_h * prices.cpu_hour + wall_h * prices.memory_gb_hour
    )
    assert any(e["action"] == "cost.collect" for e in audit_events(action="cost."))


def test_gateway_traffic_is_rolled_up_by_key_team_deployment_and_model() -> None:
    key, _ = create_key("client", team="growth", project="web")
    other, _ = create_key("client")
    now = time.time()
    _traffic(
        [
            {
                "ts": now,
                "deployment": "churn",
                "model_version": "churn@1",
                "key_id": key["id"],
                "latency_ms": 1000.0,
                "tokens": 0,
            },
            {
                "ts": now,
                "deployment": "churn",
                "model_version": "churn@1",
                "key_id": key["id"],
                "latency_ms": 2000.0,
                "tokens": 0,
            },
            {
                "ts": now,
                "deployment": "chat",
                "model_version": "lm@3",
                "key_id": other["id"],
                "latency_ms": 10.0,
                "tokens": 1500,
                "status": 500,
            },
        ]
    )
    assert collect() == {"jobs": 0, "gateway": 2}
    by_dep = {r["deployment"]: r for r in cost_report("deployment", refresh=False)["rows"]}
    prices = load_prices()
    assert by_dep["churn"]["requests"] == 2
    assert by_dep["churn"]["cpu_hours"] == pytest.approx(3.0 / 3600)
    assert by_dep["chat"]["tokens"] == 1500
    assert by_dep["chat"]["cost"] == pytest.approx(
        1.5 * prices.tokens_1k + 0.01 / 3600 * prices.cpu_hour
    )
    by_team = {r["team"]: r for r in cost_report("team")["rows"]}
    assert set(by_team) == {"growth", "-"}
    assert {r["project"] for r in cost_report("project")["rows"]} == {"web", "-"}
    assert {r["model"] for r in cost_report("model")["rows"]} == {"churn@1", "lm@3"}
    # More traffic later is added; what was entered is not entered again.
    _traffic(
        [
            {
                "ts": now,
                "deployment": "churn",
                "model_version": "churn@1",
                "key_id": key["id"],
                "latency_ms": 5.0,
            }
        ]
    )
    assert collect()["gateway"] == 1
    assert {r["deployment"]: r["requests"] for r in cost_report("deployment")["rows"]}["churn"] == 3


def test_since_and_until_bound_the_report() -> None:
    key, _ = create_key("client", team="growth")
    day = 86400.0
    now = time.time()
    _traffic(
        [
            {"ts": now - 10 * day, "deployment": "d", "key_id": key["id"], "tokens": 1000},
            {"ts": now, "deployment": "d", "key_id": key["id"], "tokens": 2000},
        ]
    )
    assert len(cost_report("day")["rows"]) == 2
    (recent,) = cost_report("team", since="7d")["rows"]
    assert recent["tokens"] == 2000
    (old,) = cost_report("team", until="7d")["rows"]
    assert old["tokens"] == 1000


def test_prices_come_from_the_workspace_file(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIFAB_PRICE_TOKENS_1K", "3")
    assert load_prices().tokens_1k == 3.0
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "prices.yaml").write_text("currency: EUR\ntokens_1k: 7.5\n")
    assert (load_prices().currency, load_prices().tokens_1k) == ("EUR", 7.5)
    (workspace / "prices.yaml").write_text("cpu_hour: -1\ngpu_hours: 3\n")
    with pytest.raises(
        InvalidInputError, match=r"prices.yaml: cpu_hour: .*; gpu_hours: unknown key"
    ):
        load_prices()


@pytest.mark.parametrize("bad", ["yesterday", "7 days", "-3d"])
def test_bad_since_is_named(bad: str) -> None:
    with pytest.raises(InvalidInputError, match="since"):
        parse_since(bad)


def test_unknown_grouping_is_named() -> None:
    with pytest.raises(InvalidInputError, match="by 'customer'"):
        cost_report("customer")
