"""Runs and models in Debian's chromium: metric curves, runs compared on one chart, a model
version's lineage and card, an alias moved by a developer, and what a viewer may not do."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.sync_api import expect

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
XSS = "<img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def runs(dashboard: Any) -> dict[str, Any]:
    """The quickstart's training run, a second short one (registered as churn@2), and a run
    whose name and param hold markup."""
    from aifab.track import resolve_model, start_run
    from aifab.train.recipes.classify import main

    cfg = yaml.safe_load((EXAMPLES / "quickstart" / "train.yaml").read_text())
    cfg.update(epochs=3, register="churn", system_metrics=False, threads=1, progress=False)
    second = main(cfg)
    with start_run("probe", run_name=XSS, params={"note": "<script>alert(2)</script>"},
                   system_metrics=False) as probe:  # fmt: skip
        probe.log_metrics({"loss": 1.0}, step=0)
    return {
        "first": resolve_model("churn@1")["run_id"],
        "second": second["run_id"],
        "second_version": second["model_version"],
        "probe": probe.id,
    }


def _accept_confirms(page: Any) -> None:
    page.on("dialog", lambda dialog: dialog.accept())


def test_a_run_page_draws_each_metric_curve(
    sign_in: Callable[..., Any],
    screenshot: Callable[..., Any],
    chart_drawn: Callable[..., Any],
    runs: dict[str, Any],
    dashboard: Any,
) -> None:
    page = sign_in("viewer")
    page.get_by_role("link", name="Runs").click()
    expect(page.get_by_role("heading", name="Runs", level=1)).to_be_visible()
    screenshot(page, "runs")
    page.goto(f"{dashboard.url}/ui/runs/{runs['first']}")
    assert page.get_by_role("heading", name="Metric curves").is_visible()
    assert chart_drawn(page, "metric-0")
    labels = page.locator("canvas[id^=metric-]").evaluate_all(
        "cs => cs.map(c => c.getAttribute('aria-label'))"
    )
    assert any(label.startswith("train_loss by step") for label in labels), labels
    data = page.get_by_role("link", name="customers_split@", exact=False).first
    assert data.get_attribute("href").startswith("/ui/data/customers_split/versions/")
    screenshot(page, "run")


def test_two_runs_compared_on_one_chart(
    sign_in: Callable[..., Any],
    screenshot: Callable[..., Any],
    chart_drawn: Callable[..., Any],
    runs: dict[str, Any],
    dashboard: Any,
) -> None:
    page = sign_in("viewer")
    page.goto(f"{dashboard.url}/ui/runs?experiment=quickstart")
    for run_id in (runs["first"], runs["second"]):
        page.locator(f"#pick-{run_id}").check()
    page.get_by_role("button", name="Compare selected runs").click()
    page.wait_for_url("**/ui/runs/compare?**")
    page.get_by_label("Metric", exact=True).select_option("train_loss")
    page.get_by_role("button", name="Draw").click()
    assert chart_drawn(page, "compare-chart")
    lines = page.evaluate("Chart.getChart(document.getElementById('compare-chart')).data.datasets")
    assert len(lines) == 2 and all(any(v is not None for v in d["data"]) for d in lines)
    assert page.get_by_role("cell", name="epochs").is_visible()  # 30 vs 3: a param that differs
    screenshot(page, "runs-compare")


def test_a_version_page_shows_lineage_and_the_card_a_developer_built(
    sign_in: Callable[..., Any],
    screenshot: Callable[..., Any],
    runs: dict[str, Any],
    dashboard: Any,
) -> None:
    from aifab.inference.export import export_model

    export_model("churn@1", "onnx", repeats=3)
    page = sign_in("developer")
    page.goto(f"{dashboard.url}/ui/models/churn/1")
    onnx = page.locator("section", has=page.get_by_role("heading", name="Export reports"))
    cells = onnx.locator("tbody tr", has_text="onnx").locator("td").all_inner_texts()
    assert float(cells[1]) > 0 and float(cells[2]) > 0, cells  # size ratio, speed-up
    assert cells[4].startswith(f"runs:/{runs['first']}/exports/onnx")
    lineage = page.locator("ol.lineage")
    assert lineage.get_by_role("link", name="churn", exact=True).get_attribute("href") == (
        "/ui/deployments/churn"
    )
    run_link = lineage.locator(f"a[href='/ui/runs/{runs['first']}']")
    assert run_link.count() == 1
    assert lineage.locator("a[href^='/ui/data/customers_split/versions/']").count() == 1
    page.get_by_label("Intended use").fill("Ranking accounts for a <b>retention</b> call.")
    page.get_by_role("button", name="Build the card").click()
    page.wait_for_url("**/ui/models/churn/1#card", timeout=120_000)
    card = page.locator("dl.card-fields")
    assert "Ranking accounts for a <b>retention</b> call." in card.inner_text()
    assert card.locator("b").count() == 0  # the owner's markup is text
    page.get_by_text("The card as Markdown").click()
    assert "# Model card: churn@1" in page.locator("pre.card-md").inner_text()
    screenshot(page, "model-version")
    page.goto(f"{dashboard.url}/ui/models")
    screenshot(page, "models")


def test_a_developer_moves_champion_and_the_registry_and_deployment_follow(
    sign_in: Callable[..., Any],
    screenshot: Callable[..., Any],
    runs: dict[str, Any],
    dashboard: Any,
) -> None:
    from aifab.track import resolve_model

    version = str(runs["second_version"])
    page = sign_in("developer")
    _accept_confirms(page)
    page.goto(f"{dashboard.url}/ui/models/churn")
    screenshot(page, "model")
    try:
        page.get_by_label("Alias", exact=True).fill("champion")
        page.get_by_label("Version", exact=True).select_option(version)
        with page.expect_navigation():
            page.get_by_role("button", name="Move alias").click()
        assert page.get_by_role("link", name=f"champion → {version}").is_visible()
        assert resolve_model("churn@champion")["version"] == int(version)
        _wait_serving(dashboard, f"churn@{version}")
    finally:
        page.goto(f"{dashboard.url}/ui/models/churn")
        page.get_by_label("Version", exact=True).select_option("1")
        with page.expect_navigation():
            page.get_by_role("button", name="Move alias").click()
    assert resolve_model("churn@champion")["version"] == 1
    _wait_serving(dashboard, "churn@1")


def _wait_serving(dashboard: Any, model: str) -> None:
    """Wait until the API says the ``churn`` deployment serves ``model`` as its primary."""
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = dashboard.api("GET", "/v1/deployments/churn").json()
        server = got.get("server") or {}
        if server.get("status") == "ready" and server["serving"].get("primary") == model:
            return
        time.sleep(0.2)
    raise AssertionError(f"churn never served {model}: {got}")


def test_a_viewer_sees_no_changes_and_the_routes_refuse(
    sign_in: Callable[..., Any], runs: dict[str, Any], dashboard: Any
) -> None:
    page = sign_in("viewer")
    page.goto(f"{dashboard.url}/ui/models/churn")
    assert page.get_by_role("button", name="Move alias").count() == 0
    assert page.get_by_text("needs a developer or admin key").is_visible()
    page.goto(f"{dashboard.url}/ui/models/churn/1")
    assert page.get_by_role("button", name="Build the card").count() == 0
    token = page.evaluate("document.body.dataset.csrf")
    for path, form in (
        ("/ui/models/churn/alias", {"alias": "champion", "version": "2"}),
        ("/ui/models/churn/1/card", {}),
    ):
        reply = page.request.post(dashboard.url + path, form={**form, "csrf": token})
        assert reply.status == 403, path
    from aifab.track import resolve_model

    assert resolve_model("churn@champion")["version"] == 1


def test_markup_in_run_names_and_params_stays_text(
    sign_in: Callable[..., Any], runs: dict[str, Any], dashboard: Any
) -> None:
    page = sign_in("viewer")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{dashboard.url}/ui/runs?experiment=probe")
    assert page.get_by_role("link", name=XSS).is_visible()
    page.goto(f"{dashboard.url}/ui/runs/{runs['probe']}")
    assert page.get_by_role("heading", name=f"Run {XSS}").is_visible()
    assert page.get_by_role("cell", name="<script>alert(2)</script>").is_visible()
    assert page.locator("main img").count() == 0
    page.wait_for_timeout(300)
    assert dialogs == []


def test_runs_and_models_pages_have_no_serious_accessibility_findings(
    sign_in: Callable[..., Any],
    axe_findings: Callable[..., Any],
    runs: dict[str, Any],
    dashboard: Any,
) -> None:
    page = sign_in("developer", bypass_csp=True)
    for path in (
        "/ui/runs",
        f"/ui/runs/{runs['first']}",
        f"/ui/runs/compare?run={runs['first']}&run={runs['second']}",
        "/ui/models",
        "/ui/models/churn",
        "/ui/models/churn/1",
    ):
        page.goto(dashboard.url + path)
        assert axe_findings(page) == [], path
