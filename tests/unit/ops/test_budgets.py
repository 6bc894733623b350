"""Budgets stop work where it starts: job submit refuses, the gateway answers 429 (real DB)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from aifab.core.errors import BudgetExceededError, InvalidInputError, NotFoundError
from aifab.inference.request_log import RequestLogger
from aifab.jobs import submit
from aifab.ops import budget_status, delete_budget, list_budgets, set_budget
from aifab.ops.cost.budget import BudgetGate
from aifab.serve.auth import Principal, require
from aifab.serve.errors import install_error_handlers
from aifab.serve.keys import create_key

SLEEP = {"name": "more", "run": {"recipe": "sleep", "config": {"seconds": 0.1}}}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"team": "a b", "amount": 1.0}, "team 'a b'"),
        ({"team": "t", "amount": 0.0}, "amount"),
        ({"team": "t", "amount": float("nan")}, "amount"),
        ({"team": "t", "amount": 1.0, "period": "year"}, "period 'year'"),
        ({"team": "t", "amount": 1.0, "alert_at": 1.5}, "alert-at"),
    ],
)
def test_bad_budgets_are_named(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        set_budget(**kwargs)


def test_set_replaces_and_delete_removes() -> None:
    set_budget("growth", 10.0)
    set_budget("growth", 20.0, period="week", alert_at=0.5)
    (b,) = list_budgets()
    assert (b["amount"], b["period"], b["alert_at"], b["created_by"]) == (
        20.0,
        "week",
        0.5,
        "user:test",
    )
    delete_budget("growth")
    assert list_budgets() == []
    with pytest.raises(NotFoundError, match="no budget"):
        delete_budget("growth")


def test_a_team_over_budget_cannot_submit_jobs(run_job: Callable[..., dict[str, Any]]) -> None:
    set_budget("growth", 1e-9, period="day")
    run_job(team="growth")  # under budget until its usage is entered
    (st,) = budget_status("growth")
    assert st["state"] == "over" and st["spent"] > 1e-9
    with pytest.raises(
        BudgetExceededError, match="budget exceeded: team 'growth' has spent .* daily budget 1e-09"
    ):
        submit({**SLEEP, "team": "growth"})
    # Other teams, and jobs without a team, still get in.
    assert submit({**SLEEP, "team": "search"})["state"] == "pending"
    assert submit(SLEEP)["state"] == "pending"
    set_budget("growth", 1000.0)
    assert submit({**SLEEP, "team": "growth"})["state"] == "pending"


def test_status_turns_alert_at_the_share(run_job: Callable[..., dict[str, Any]]) -> None:
    run_job(team="growth")
    set_budget("growth", 1.0)
    spent = budget_status("growth")[0]["spent"]
    assert spent > 0
    set_budget("growth", spent * 1.1, alert_at=0.5)
    (st,) = budget_status("growth")
    assert st["state"] == "alert" and 0.5 <= st["share"] < 1.0


def _gateway_app(gate: BudgetGate) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    app.state.budget_gate = gate

    @app.post("/invoke")
    def invoke(p: Principal = Depends(require("invoke"))) -> dict[str, str]:
        return {"key": p.key_id}

    @app.get("/read")
    def read(p: Principal = Depends(require("read"))) -> dict[str, str]:
        return {"key": p.key_id}

    return app


def test_the_gateway_answers_429_naming_the_budget(caplog: pytest.LogCaptureFixture) -> None:
    key, secret = create_key("admin", team="growth")
    _, free_secret = create_key("client", team="search")
    logger = RequestLogger()
    logger.log(
        {
            "deployment": "chat",
            "key_id": key["id"],
            "route": "/v1/chat",
            "status": 200,
            "tokens": 100_000,
            "latency_ms": 5.0,
        }
    )
    logger.close()
    gate = BudgetGate(refresh_s=3600)
    client = TestClient(_gateway_app(gate))
    auth = {"Authorization": f"Bearer {secret}"}
    assert client.post("/invoke", headers=auth).status_code == 200  # no budget yet
    set_budget("growth", 0.05, period="month")
    with caplog.at_level(logging.WARNING, logger="aifab.ops.cost.budget"):
        gate.refresh()
    assert "budget over: team 'growth'" in caplog.text
    r = client.post("/invoke", headers=auth)
    assert r.status_code == 429
    err = r.json()["error"]
    assert err["code"] == "budget_exceeded"
    assert "team 'growth'" in err["message"] and "monthly budget 0.05" in err["message"]
    # Reading is not spending; another team's key still calls.
    assert client.get("/read", headers=auth).status_code == 200
    assert client.post("/invoke", headers={"X-API-Key": free_secret}).status_code == 200
    set_budget("growth", 1000.0)
    gate.refresh()
    assert client.post("/invoke", headers=auth).status_code == 200


def test_cli_submit_over_budget_is_one_line_naming_the_budget(
    run_job: Callable[..., dict[str, Any]], cli: Callable[..., Any], tmp_path: Any
) -> None:
    run_job(team="growth")
    set_budget("growth", 1e-9, period="week")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: more\nteam: growth\nrun: {recipe: sleep, config: {seconds: 0.1}}\n")
    r = cli("job", "submit", spec)
    assert r.exit_code == 4
    assert r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: job refused: budget exceeded: team 'growth'")
    assert "weekly budget 1e-09" in r.stderr
