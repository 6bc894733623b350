"""Deployments in Debian's chromium: traffic charts from the fixture's requests, a canary set,
promoted and rolled back through the UI and seen in the API, try-it with a developer's key, and
a viewer who gets none of the controls."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def second_version(dashboard: Any) -> int:
    """churn@2: the champion's weights registered again, a real second version to canary."""
    from aifab.track import register_model, resolve_model

    return int(register_model(resolve_model("churn@1")["run_id"], "model", "churn")["version"])


def _accept_confirms(page: Any) -> None:
    page.on("dialog", lambda dialog: dialog.accept())


def _settled(dashboard: Any, primary: str, canary: str | None) -> dict[str, Any]:
    """The API's view of ``churn`` once this server serves ``primary`` (and ``canary``)."""
    deadline = time.monotonic() + 60
    while True:
        got: dict[str, Any] = dashboard.api("GET", "/v1/deployments/churn").json()
        server = got.get("server") or {}
        serving = server.get("serving") or {}
        if server.get("status") == "ready" and (serving.get("primary"), serving.get("canary")) == (
            primary,
            canary,
        ):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"churn never served {primary} + {canary}: {got}")
        time.sleep(0.2)


def test_the_deployment_page_draws_latency_throughput_and_batches(
    sign_in: Callable[..., Any],
    screenshot: Callable[..., Any],
    chart_drawn: Callable[..., Any],
    dashboard: Any,
) -> None:
    page = sign_in("viewer")
    page.get_by_role("link", name="Deployments").click()
    row = page.locator("tr", has_text="churn@champion")
    assert int(row.locator("td").nth(4).inner_text().replace(",", "")) >= 5
    screenshot(page, "deployments")
    row.get_by_role("link", name="churn").click()
    expect(page.get_by_role("heading", name="Deployment churn", level=1)).to_be_visible()
    for chart in ("latency-chart", "throughput-chart", "batch-chart"):
        assert chart_drawn(page, chart), chart
    p99 = page.evaluate(
        "Chart.getChart(document.getElementById('latency-chart')).data.datasets[1].data"
    )
    assert any(v is not None and v > 0 for v in p99)
    answered = page.locator("#traffic tbody tr", has_text="churn@1").locator("td").all_inner_texts()
    assert int(answered[1]) >= 5 and answered[2] == "100%", answered
    screenshot(page, "deployment")


def test_the_traffic_charts_refresh_themselves(
    sign_in: Callable[..., Any], chart_drawn: Callable[..., Any], dashboard: Any
) -> None:
    page = sign_in("viewer")
    page.goto(f"{dashboard.url}/ui/deployments/churn?window=15m")
    with page.expect_response(lambda r: "/ui/deployments/churn/traffic" in r.url, timeout=25_000):
        pass
    page.wait_for_timeout(300)  # htmx settles the swap, app.js draws the new canvases
    assert chart_drawn(page, "latency-chart")
    assert "last 15m" in page.locator("#traffic figcaption").first.inner_text()


def test_canary_set_promoted_and_rolled_back_in_the_ui_is_what_the_api_says(
    sign_in: Callable[..., Any], screenshot: Callable[..., Any], dashboard: Any, second_version: int
) -> None:
    from aifab.track import resolve_model, set_alias

    canary = f"churn@{second_version}"
    page = sign_in("developer")
    _accept_confirms(page)
    page.goto(f"{dashboard.url}/ui/deployments/churn")
    try:
        page.get_by_label("Canary version").fill(canary)
        page.get_by_label("Canary share of requests (%)").fill("40")
        with page.expect_navigation():
            page.get_by_role("button", name="Set canary").click()
        got = _settled(dashboard, "churn@1", canary)
        assert (got["canary"], got["canary_weight"]) == (canary, 40.0)
        page.reload()
        assert page.get_by_text("canary churn@2: 40%").is_visible()
        screenshot(page, "deployment-canary")

        with page.expect_navigation():
            page.get_by_role("button", name="Promote canary").click()
        got = _settled(dashboard, canary, None)
        assert (got["model"], got["canary"]) == ("churn@champion", None)  # the alias moved
        assert resolve_model("churn@champion")["version"] == second_version

        page.get_by_label("Canary version").fill("churn@1")
        page.get_by_label("Canary share of requests (%)").fill("10")
        with page.expect_navigation():
            page.get_by_role("button", name="Set canary").click()
        _settled(dashboard, canary, "churn@1")
        with page.expect_navigation():
            page.get_by_role("button", name="Roll back canary").click()
        got = _settled(dashboard, canary, None)
        assert got["canary"] is None and got["canary_weight"] == 0.0
        assert page.get_by_role("button", name="Promote canary").count() == 0
        from aifab.core.audit import list_events
        from aifab.core.db import session_scope

        with session_scope() as s:
            events = [(e.action, e.actor) for e in list_events(s, limit=4, obj="deployment:churn")]
        developer = f"key:{dashboard.key_ids['developer']}"
        assert events == [
            ("deployment.rollback", developer),
            ("deployment.update", developer),
            ("deployment.promote", developer),
            ("deployment.update", developer),
        ]
    finally:
        set_alias("churn", "champion", 1)
        _settled(dashboard, "churn@1", None)


def test_try_it_predicts_with_the_developers_key(
    sign_in: Callable[..., Any], screenshot: Callable[..., Any], dashboard: Any
) -> None:
    from aifab.inference.request_log import recent_requests

    page = sign_in("developer")
    page.goto(f"{dashboard.url}/ui/deployments/churn")
    assert "[" in page.get_by_label("Records").input_value()  # started with logged records
    page.get_by_role("button", name="Send with my key").click()
    result = page.locator("#try-result pre")
    result.wait_for()
    assert '"predictions"' in result.inner_text() and '"label"' in result.inner_text()
    screenshot(page, "deployment-try")
    deadline = time.monotonic() + 10
    while not any(
        r["key_id"] == dashboard.key_ids["developer"] and r["status"] == 200
        for r in recent_requests("churn", limit=20)
    ):
        assert time.monotonic() < deadline, "try-it was not logged under the developer's key"
        time.sleep(0.2)
    page.get_by_label("Records").fill('[{"plan": <img src=x onerror=alert(1)>}]')
    page.get_by_role("button", name="Send with my key").click()
    error = page.locator("#try-result .error")
    error.wait_for()
    assert "Refused (400): malformed JSON" in error.inner_text()


def test_a_viewer_gets_no_controls_and_the_routes_refuse(
    sign_in: Callable[..., Any], dashboard: Any
) -> None:
    page = sign_in("viewer")
    page.goto(f"{dashboard.url}/ui/deployments/churn")
    for name in ("Set canary", "Promote canary", "Roll back canary", "Send with my key"):
        assert page.get_by_role("button", name=name).count() == 0, name
    assert page.get_by_text("a viewer key may only look").is_visible()
    token = page.evaluate("document.body.dataset.csrf")
    for action in ("canary", "promote", "rollback", "try"):
        reply = page.request.post(
            f"{dashboard.url}/ui/deployments/churn/{action}",
            form={"csrf": token, "canary": "churn@1", "weight": "50", "records": "[]"},
        )
        assert reply.status == 403, action
    assert dashboard.api("GET", "/v1/deployments/churn").json()["canary"] is None


def test_deployment_pages_have_no_serious_accessibility_findings(
    sign_in: Callable[..., Any], axe_findings: Callable[..., Any], dashboard: Any
) -> None:
    page = sign_in("developer", bypass_csp=True)
    for path in ("/ui/deployments", "/ui/deployments/churn"):
        page.goto(dashboard.url + path)
        assert axe_findings(page) == [], path
