"""Monitoring, alerts, cost and audit in Debian's chromium against a live server: a monitor run
twice over the quickstart deployment's traffic, an alert it fired, silenced through the page.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def watched(dashboard: Any) -> dict[str, Any]:
    """A monitor of ``churn`` run twice (drift and a rule that fires on any traffic), a budget."""
    from aifab.ops import cost_report, create_monitor, run_monitor, set_budget
    from aifab.ops.window import load_window

    deadline = time.monotonic() + 60
    while len(load_window("churn", 0, time.time() + 60)) < 5:  # the log is written behind
        assert time.monotonic() < deadline, "the quickstart's requests never reached the log"
        time.sleep(0.2)
    create_monitor(
        "churn-watch",
        {
            "deployment": "churn",
            "window_s": 3600,
            "min_rows": 10,
            "rules": [{"name": "traffic_seen", "value": "requests", "op": ">=", "threshold": 1}],
        },
    )
    first = run_monitor("churn-watch")
    second = run_monitor("churn-watch")
    assert "drift" in second["report"] and "error" not in second["report"]["drift"], second
    teams = [r["team"] for r in cost_report("team", refresh=False)["rows"]]
    team = next((t for t in teams if t), "ml")
    set_budget(team, 0.5, period="month")
    return {"runs": [first, second], "team": team}


def test_monitoring_draws_drift_per_feature_and_reference_beside_live(
    sign_in: Callable[..., Any],
    screenshot: Callable[..., Any],
    chart_drawn: Callable[..., Any],
    watched: dict[str, Any],
) -> None:
    page = sign_in("viewer")
    page.get_by_role("link", name="Monitoring").click()
    row = page.locator("tr", has_text="churn-watch")
    expect(row.get_by_text("breach")).to_be_visible()
    screenshot(page, "monitoring")
    row.get_by_role("link", name="churn-watch").click()
    assert chart_drawn(page, "drift-1")
    assert chart_drawn(page, "dist-chart")
    assert chart_drawn(page, "trend-requests")
    features = page.get_by_label("Feature", exact=True).locator("option").all_inner_texts()
    columns = watched["runs"][1]["report"]["drift"]["columns"]
    assert len(features) == len(columns) >= 2
    # The drift chart has one line per feature compared.
    spec = page.evaluate("JSON.parse(document.getElementById('drift-1-spec').textContent)")
    assert {d["label"] for d in spec["data"]["datasets"]} <= set(columns)
    assert len(spec["data"]["labels"]) == 2  # two runs
    # Another feature of the older run: both series are shares that sum to one.
    other = list(columns)[-1]
    page.get_by_label("Run", exact=True).select_option(str(watched["runs"][0]["id"]))
    page.get_by_label("Feature", exact=True).select_option(other)
    page.get_by_role("button", name="Show").click()
    assert chart_drawn(page, "dist-chart")
    spec = page.evaluate("JSON.parse(document.getElementById('dist-chart-spec').textContent)")
    series = {d["label"]: d["data"] for d in spec["data"]["datasets"]}
    assert set(series) == {"reference", "live"}
    assert abs(sum(series["reference"]) - 1) < 1e-6 and abs(sum(series["live"]) - 1) < 1e-6
    assert f"feature {other}" in page.locator("#h-dist + form + p").inner_text()
    screenshot(page, "monitor")


def test_a_developer_silences_an_alert_in_the_page_and_the_api_sees_it(
    sign_in: Callable[..., Any],
    screenshot: Callable[..., Any],
    watched: dict[str, Any],
    dashboard: Any,
) -> None:
    viewer = sign_in("viewer")
    viewer.get_by_role("link", name="Alerts").click()
    expect(viewer.locator("#alerts-table tr", has_text="traffic_seen")).to_have_count(1)
    assert viewer.locator("#silence-form").count() == 0
    assert viewer.locator("form[action='/ui/alerts/silence']").count() == 0

    page = sign_in("developer")
    page.get_by_role("link", name="Alerts").click()
    screenshot(page, "alerts")
    page.get_by_label("Rule (blank: any rule of the monitor)").fill("traffic_seen")
    page.get_by_label("Monitor (blank: this rule on any monitor)").fill("churn-watch")
    page.get_by_label("For", exact=True).select_option("4 hours")
    page.get_by_label("Reason").fill("known: test traffic")
    page.locator("#silence-form").get_by_role("button", name="Silence").click()
    page.wait_for_url("**/ui/alerts")
    assert page.locator("#silences-table tr", has_text="known: test traffic").count() == 1
    assert page.locator("#alerts-table tr", has_text="traffic_seen").get_by_text("silenced").count()
    alerts = dashboard.api("GET", "/v1/alerts", "viewer", params={"state": "firing"}).json()
    assert [a["silenced"] for a in alerts if a["rule"] == "traffic_seen"] == [True]
    from aifab.ops import list_silences

    [silence] = [s for s in list_silences() if s["reason"] == "known: test traffic"]
    assert silence["created_by"] == f"key:{dashboard.key_ids['developer']}"
    screenshot(page, "alerts-silenced")


def test_the_silence_route_refuses_a_viewer(sign_in: Callable[..., Any], dashboard: Any) -> None:
    page = sign_in("viewer")
    page.get_by_role("link", name="Alerts").click()
    # A click does not wait for the page it opens: reading the body at once
    # raced the navigation (body was null on a loaded CI machine).
    page.wait_for_url("**/ui/alerts")
    token = page.evaluate("document.body.dataset.csrf")
    reply = page.request.post(
        dashboard.url + "/ui/alerts/silence",
        form={"csrf": token, "rule": "traffic_seen", "duration": "1 hour"},
        headers={"Origin": dashboard.url},
    )
    assert reply.status == 403 and "lacks permission" in reply.text()


def test_cost_by_team_project_and_day_with_budgets(
    sign_in: Callable[..., Any],
    screenshot: Callable[..., Any],
    chart_drawn: Callable[..., Any],
    watched: dict[str, Any],
) -> None:
    page = sign_in("viewer")
    page.get_by_role("link", name="Cost").click()
    for by in ("day", "team", "project"):
        assert chart_drawn(page, f"cost-{by}"), by
    budget = page.locator("#budgets-table tr", has_text=watched["team"])
    assert budget.locator("meter").count() == 1 and "%" in budget.inner_text()
    screenshot(page, "cost")


def test_the_audit_log_filters_and_verifies_its_chain(
    sign_in: Callable[..., Any], screenshot: Callable[..., Any], watched: dict[str, Any]
) -> None:
    page = sign_in("viewer")
    page.get_by_role("link", name="Audit").click()
    assert "Not verified" in page.locator("#chain-status").inner_text()
    page.get_by_label("Object starts with").fill("monitor:churn-watch")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/ui/audit?*object=monitor%3Achurn-watch*")
    rows = page.locator("#audit-events tbody tr")
    assert rows.count() >= 1
    assert set(page.locator("#audit-events tbody td:nth-child(5)").all_inner_texts()) == {
        "monitor:churn-watch"
    }
    assert "monitor.create" in rows.last.inner_text()
    page.get_by_label("Object starts with").fill("")
    page.get_by_label("Action starts with").fill("no.such.action")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_text("No event matches.")).to_be_visible()
    page.get_by_role("link", name="Verify the chain now").click()
    expect(page.locator("#chain-status")).to_contain_text("intact")
    screenshot(page, "audit")


def test_operations_pages_have_no_serious_accessibility_findings(
    sign_in: Callable[..., Any],
    axe_findings: Callable[..., Any],
    watched: dict[str, Any],
    dashboard: Any,
) -> None:
    page = sign_in("developer", bypass_csp=True)
    for path in (
        "/ui/monitoring",
        "/ui/monitoring/churn-watch",
        "/ui/alerts",
        "/ui/cost",
        "/ui/audit",
    ):
        page.goto(dashboard.url + path)
        assert axe_findings(page) == [], path
