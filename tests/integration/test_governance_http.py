"""Cost, budgets and explanations over HTTP: a real uvicorn server serving the churn model."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests import live_http

from aifab.inference.deployments import create_deployment, list_deployments
from aifab.ops import set_budget
from aifab.ops.explain.model import load_tabular
from aifab.serve.keys import create_key

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def env(
    churn_model: dict[str, Any], module_workspace: Path, live_server: Callable[..., Any]
) -> Iterator[dict[str, Any]]:
    if "churn" not in {d["name"] for d in list_deployments()}:
        create_deployment("churn@champion", name="churn")
    keys = {}
    for name, role, team in (
        ("growth", "client", "growth"),
        ("search", "client", "search"),
        ("viewer", "viewer", None),
    ):
        _, secret = create_key(role, name=name, rate=None, team=team, project="web")
        keys[name] = {"Authorization": f"Bearer {secret}"}
    server = live_server(reconcile_interval_s=0.2)
    yield {"url": server.url, "keys": keys, "records": load_tabular("churn@1").test_records}


def test_explain_a_deployed_prediction(env: dict[str, Any]) -> None:
    records = env["records"][:2]
    r = live_http.post(
        f"{env['url']}/v1/explain/churn",
        json={"records": records, "top": 3},
        headers=env["keys"]["search"],
        timeout=60,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["deployment"] == "churn" and body["model"] == "churn@1"
    assert [len(e["contributions"]) for e in body["explanations"]] == [3, 3]
    predicted = live_http.post(
        f"{env['url']}/v1/predict/churn", json={"records": records}, headers=env["keys"]["search"]
    ).json()["predictions"]
    assert [e["label"] for e in body["explanations"]] == [p["label"] for p in predicted]


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"records": [{"age": "old"}]}, 422, "row 0, field"),
        ({"rows": [[1]]}, 422, "records"),
        ({"records": [{}], "top": "all"}, 422, "top"),
        ({"records": [{}], "extra": 1}, 422, "unknown keys"),
    ],
)
def test_explain_bad_bodies_are_4xx(
    env: dict[str, Any], body: dict[str, Any], status: int, needle: str
) -> None:
    r = live_http.post(f"{env['url']}/v1/explain/churn", json=body, headers=env["keys"]["search"])
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]["message"]


def test_explain_needs_an_invoking_key_and_a_known_deployment(env: dict[str, Any]) -> None:
    body = {"records": env["records"][:1]}
    r = live_http.post(f"{env['url']}/v1/explain/churn", json=body, headers=env["keys"]["viewer"])
    assert r.status_code == 403
    r = live_http.post(f"{env['url']}/v1/explain/nope", json=body, headers=env["keys"]["search"])
    assert r.status_code == 404
    r = live_http.post(
        f"{env['url']}/v1/explain/churn", content=b"{" * 5000, headers=env["keys"]["search"]
    )
    assert r.status_code == 400


def test_traffic_is_costed_and_a_spent_budget_answers_429(env: dict[str, Any]) -> None:
    url, keys = env["url"], env["keys"]
    body = {"records": env["records"][:1]}
    for _ in range(3):
        assert live_http.post(
            f"{url}/v1/predict/churn", json=body, headers=keys["growth"]
        ).is_success
    time.sleep(1.0)  # the request log writes in the background
    r = live_http.get(f"{url}/v1/cost", params={"by": "team"}, headers=keys["viewer"])
    assert r.status_code == 200, r.text
    by_team = {row["team"]: row for row in r.json()["rows"]}
    assert by_team["growth"]["requests"] >= 3 and by_team["growth"]["cost"] > 0
    r = live_http.get(f"{url}/v1/cost", params={"by": "galaxy"}, headers=keys["viewer"])
    assert r.status_code == 422 and "by 'galaxy'" in r.json()["error"]["message"]

    set_budget("growth", 1e-12, period="day")
    deadline = time.monotonic() + 30
    while True:  # the gateway re-reads budgets every few seconds
        r = live_http.post(f"{url}/v1/predict/churn", json=body, headers=keys["growth"])
        if r.status_code == 429 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert r.status_code == 429, r.text
    assert r.json()["error"]["code"] == "budget_exceeded"
    assert "team 'growth'" in r.json()["error"]["message"]
    assert live_http.post(f"{url}/v1/predict/churn", json=body, headers=keys["search"]).is_success
    r = live_http.get(f"{url}/v1/budgets", headers=keys["viewer"])
    assert [(b["team"], b["state"]) for b in r.json()] == [("growth", "over")]
