"""Deployment pages through the real app (no browser): 404s, role limits, CSRF, canary actions.

The model files are placeholders: the server fails to load them, which the pages must show
without breaking (the browser tests predict with a real model).
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from aifab.core.audit import list_events
from aifab.core.db import session_scope
from aifab.inference.deployments import create_deployment, get_deployment, update_deployment
from aifab.inference.request_log import RequestLogger
from aifab.serve.app import create_app
from aifab.track import register_model, resolve_model, set_alias, start_run

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from web_signin import sign_in  # noqa: E402

ACTIONS = ("canary", "promote", "rollback", "try")


@pytest.fixture
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def deployed(module_workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """``m`` versions 1 and 2 (``champion`` -> 1) deployed as ``d`` with an hour of traffic."""
    model = tmp_path_factory.mktemp("model")
    (model / "aifab-model.json").write_text('{"builder": "mlp", "config": {}}')
    with start_run("t-deployment-pages", system_metrics=False) as run:
        run.log_artifacts(model, "model")
    register_model(run.id, "model", "m")
    register_model(run.id, "model", "m")
    set_alias("m", "champion", 1)
    create_deployment("m@champion", name="d")
    logger = RequestLogger()
    now = time.time()
    for i in range(120):
        status = 500 if i % 30 == 0 else 200
        logger.log({"ts": now - 3000 + i * 25, "deployment": "d", "route": "/v1/predict/x",
                    "status": status, "latency_ms": 2.0 + i % 7,
                    "model_version": "m@1"})  # fmt: skip
    logger.close()
    return "d"


@pytest.fixture
def client(deployed: str) -> Iterator[TestClient]:
    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        yield c
        _settled()
    set_alias("m", "champion", 1)
    update_deployment("d", model="m@champion", canary=None)


def _settled(timeout_s: float = 30.0) -> None:
    """Wait until the server has tried the deployment's newest generation (it fails to load).

    Stopping the app while a reload is still being reconciled can hang its shutdown.
    """
    deadline = time.monotonic() + timeout_s
    while get_deployment("d")["status"] in ("pending", "loading") and time.monotonic() < deadline:
        time.sleep(0.1)


def _post(client: TestClient, action: str, token: str | None, **fields: str) -> Any:
    data = dict(fields)
    if token is not None:
        data["csrf"] = token
    return client.post(f"/ui/deployments/d/{action}", data=data, follow_redirects=False)


def test_unknown_deployments_are_404_pages(client: TestClient) -> None:
    sign_in(client, "viewer")
    r = client.get("/ui/deployments/nope")
    assert r.status_code == 404 and "no deployment &#39;nope&#39;" in r.text


def test_the_page_draws_the_logged_traffic(client: TestClient) -> None:
    sign_in(client, "viewer")
    r = client.get("/ui/deployments")
    assert r.status_code == 200 and 'href="/ui/deployments/d"' in r.text
    r = client.get("/ui/deployments/d?window=1h")
    assert r.status_code == 200
    spec = re.search(r'id="latency-chart-spec">(.*?)</pre>', r.text)
    assert spec is not None and '"label": "p99"' in spec.group(1)
    assert re.search(
        r'<div class="stat-value">120</div>\s*<div class="stat-label">requests', r.text
    )
    assert re.search(r'<div class="stat-value">4</div>\s*<div class="stat-label">errors', r.text)
    assert re.search(r"<td>m@1</td><td class=\"num\">120</td><td class=\"num\">100%</td>", r.text)
    assert client.get("/ui/deployments/d?window=1y").status_code == 200  # unknown: the default
    fragment = client.get("/ui/deployments/d/traffic?window=15m", headers={"HX-Request": "true"})
    assert fragment.status_code == 200 and 'id="latency-chart-spec"' in fragment.text
    assert "<h1>" not in fragment.text  # the charts alone, for the page's htmx refresh
    assert client.get("/ui/deployments/nope/traffic").status_code == 404


def test_a_viewer_gets_no_controls_and_every_action_refuses(client: TestClient) -> None:
    token = sign_in(client, "viewer").csrf
    r = client.get("/ui/deployments/d")
    assert "Set canary" not in r.text and "Send with my key" not in r.text
    assert "need a developer or admin key" in r.text and "may only look" in r.text
    for action in ACTIONS:
        r = _post(client, action, token, canary="m@2", weight="10", records="[]")
        assert r.status_code == 403, action
    assert get_deployment("d")["canary"] is None


def test_actions_need_the_session_csrf_token(client: TestClient) -> None:
    sign_in(client, "developer")
    for action in ACTIONS:
        r = _post(client, action, None, canary="m@2", weight="10", records="[]")
        assert r.status_code == 403 and "CSRF" in r.text, action
    r = _post(client, "canary", "forged", canary="m@2", weight="10")
    assert r.status_code == 403
    assert get_deployment("d")["canary"] is None


def test_canary_promote_and_rollback_as_the_developer_key(client: TestClient) -> None:
    signed = sign_in(client, "developer")
    key_id, token = signed.record["id"], signed.csrf
    r = _post(client, "canary", token, canary="m@2", weight="25")
    assert r.status_code == 303 and r.headers["location"] == "/ui/deployments/d"
    d = get_deployment("d")
    assert (d["canary"], d["canary_weight"]) == ("m@2", 25.0)
    page = client.get("/ui/deployments/d").text
    assert "Promote canary" in page and "Roll back canary" in page
    assert _post(client, "promote", token).status_code == 303
    d = get_deployment("d")
    assert (d["model"], d["canary"]) == ("m@champion", None)  # the alias moved instead
    assert resolve_model("m@champion")["version"] == 2
    assert _post(client, "canary", token, canary="m@1", weight="5").status_code == 303
    assert _post(client, "rollback", token).status_code == 303
    assert get_deployment("d")["canary"] is None
    with session_scope() as s:
        events = list_events(s, limit=10, obj="deployment:d", actor=f"key:{key_id}")
        actions = [e.action for e in events]
    assert actions[:4] == [
        "deployment.rollback",
        "deployment.update",
        "deployment.promote",
        "deployment.update",
    ]


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        ({"canary": "m@2", "weight": "lots"}, 400),
        ({"canary": "m@2", "weight": "150"}, 400),
        ({"canary": "", "weight": "10"}, 400),
        ({"canary": "m@9", "weight": "10"}, 404),
    ],
)
def test_bad_canary_settings_are_named(
    client: TestClient, fields: dict[str, str], status: int
) -> None:
    token = sign_in(client, "developer").csrf
    r = _post(client, "canary", token, **fields)
    assert r.status_code == status
    assert get_deployment("d")["canary"] is None


def test_promoting_or_rolling_back_without_a_canary_says_so(client: TestClient) -> None:
    token = sign_in(client, "developer").csrf
    for action in ("promote", "rollback"):
        r = _post(client, action, token)
        assert r.status_code == 409 and "has no canary" in r.text


def test_try_it_answers_the_predict_error_as_the_api_would(client: TestClient) -> None:
    token = sign_in(client, "developer").csrf
    r = _post(client, "try", token, records='[{"x": 1}]')
    # The placeholder model cannot load: predict says so (503 loading, or the load failure).
    assert r.status_code in (503, 404)
    assert 'id="try-result"' in r.text and "deployment &#39;d&#39;" in r.text


def test_try_it_meets_the_keys_rate_limit_like_an_api_call(client: TestClient) -> None:
    token = sign_in(client, "developer", rate="1/min").csrf
    first = _post(client, "try", token, records='[{"x": 1}]')
    assert first.status_code != 429
    second = _post(client, "try", token, records='[{"x": 1}]')
    assert second.status_code == 429 and "rate limit of key" in second.text
