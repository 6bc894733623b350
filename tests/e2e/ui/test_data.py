"""The data section in Debian's chromium: datasets -> versions -> a version's profile charts,
quarantine reasons, diffs, the lineage graph, keyboard labeling, role limits and XSS probes."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.integration

#: A value and a column name that would run script if the pages did not escape them.
PROBE_VALUE = "<img src=x onerror=alert(1)>"
PROBE_COLUMN = "<script>x</script>"


@pytest.fixture(scope="module")
def probe(dashboard: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny dataset whose values and a column name are markup: ``xss_probe@1``."""
    from aifab.data import ingest

    path = tmp_path_factory.mktemp("probe") / "probe.csv"
    path.write_text(
        f'id,"{PROBE_COLUMN}",note\n'
        f'1,"{PROBE_VALUE}",plain\n'
        '2,"<b>bold</b>","</td></tr><script>alert(2)</script>"\n'
    )
    return ingest("xss_probe", str(path)).version.ref


def _dialogs(page: Any) -> list[str]:
    seen: list[str] = []
    page.on("dialog", lambda d: (seen.append(d.message), d.dismiss()))
    return seen


def test_datasets_to_a_version_whose_column_charts_draw(
    sign_in: Callable[..., Any], screenshot: Callable[..., Any], chart_drawn: Callable[..., Any]
) -> None:
    page = sign_in("viewer")
    page.get_by_role("link", name="Data", exact=True).click()
    page.wait_for_url("**/ui/data")
    assert page.get_by_role("heading", name="Datasets", level=1).is_visible()
    screenshot(page, "data-datasets")
    page.get_by_role("link", name="customers_clean", exact=True).click()
    page.wait_for_url("**/ui/data/customers_clean")
    screenshot(page, "data-dataset")
    page.get_by_role("link", name="customers_clean@1", exact=True).first.click()
    page.wait_for_url("**/ui/data/customers_clean/versions/1")
    assert page.get_by_role("heading", name="Version customers_clean@1").is_visible()
    age = page.locator("canvas[aria-label='Histogram of age']")
    assert chart_drawn(page, age.get_attribute("id"))
    plan = page.locator("canvas[aria-label='Most common values of plan']")
    assert chart_drawn(page, plan.get_attribute("id"))
    facts = page.locator("dl.facts").inner_text()
    assert re.search(r"Content hash\s+[0-9a-f]{64}", facts), facts
    assert page.locator("table.preview tbody tr").count() == 10
    screenshot(page, "data-version")


def test_quarantine_shows_each_rows_rule_and_reason(
    sign_in: Callable[..., Any], dashboard: Any, screenshot: Callable[..., Any]
) -> None:
    page = sign_in("viewer")
    # The quickstart's validate step quarantines rows of customers_clean into customers_valid.
    page.goto(dashboard.url + "/ui/data/customers_valid/versions/1")
    section = page.locator("section", has=page.get_by_role("heading", name="Quarantine"))
    assert "age_in_range" in section.inner_text()
    page.get_by_role("link", name="all quarantined rows").click()
    page.wait_for_url("**/ui/data/customers_valid/quarantine")
    row = page.locator("tbody tr", has_text="age_in_range").first
    assert re.search(r"age=-?\d+ not between 18 and 100", row.inner_text())
    assert page.locator("tbody tr", has_text="valid_email").count() > 0
    screenshot(page, "data-quarantine")


def test_diff_of_two_versions_picked_in_the_form(
    sign_in: Callable[..., Any],
    dashboard: Any,
    screenshot: Callable[..., Any],
    chart_drawn: Callable[..., Any],
) -> None:
    page = sign_in("viewer")
    page.goto(dashboard.url + "/ui/data/customers_valid/diff")
    page.get_by_label("Version A").fill("customers_clean@1")
    page.get_by_label("Version B").fill("1")
    page.get_by_role("button", name="Compare").click()
    page.wait_for_url("**/diff?a=customers_clean%401&b=1")
    assert page.get_by_role("heading", name="Compare customers_clean@1 and customers_valid@1")
    stats = page.locator(".stats").inner_text()
    assert re.search(r"1,000\s+rows in customers_clean@1", stats), stats
    assert re.search(r"963\s+rows in customers_valid@1", stats), stats
    assert re.search(r"37\s+rows only in A", stats), stats
    assert chart_drawn(page, "diff-chart")
    age = page.locator("canvas[aria-label^='age: quantiles in customers_clean@1']")
    assert chart_drawn(page, age.get_attribute("id"))  # the rule dropped ages out of range
    screenshot(page, "data-diff")


def test_lineage_graph_reaches_runs_models_deployments_and_its_links_work(
    sign_in: Callable[..., Any], dashboard: Any, screenshot: Callable[..., Any]
) -> None:
    page = sign_in("viewer")
    page.goto(dashboard.url + "/ui/data/customers_split/versions/1/lineage")
    svg = page.locator("svg#lineage-graph")
    kinds = svg.locator("[data-node]").evaluate_all("els => els.map(e => e.dataset.node[0])")
    assert {"s", "v", "f", "r", "m", "d"} <= set(kinds), kinds
    assert svg.locator("a[href='/ui/models/churn/1']").count() == 1
    assert svg.locator("a[href='/ui/deployments/churn']").count() == 1
    assert svg.locator("a[href^='/ui/runs/']").count() >= 1
    assert svg.locator("path.edge").count() >= 9
    # The page itself never scrolls sideways, at a laptop's width or a narrow window's: a
    # wide graph scrolls inside its own box.
    for width in (1280, 800):
        page.set_viewport_size({"width": width, "height": 900})
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the page is {overflow} px wider than a {width} px window"
    page.set_viewport_size({"width": 1280, "height": 900})
    screenshot(page, "data-lineage")
    list_text = page.locator("ul.lineage-list").inner_text()
    assert "version customers_split@1 → features customers_features" in list_text
    # Keyboard: Tab reaches the graph's links; Enter on the raw version opens its page.
    for _ in range(80):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.dataset.node || ''") == "v:customers_raw@1":
            break
    else:
        pytest.fail("Tab never reached the customers_raw@1 node of the graph")
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/data/customers_raw/versions/1")
    page.go_back()
    svg.locator("a[data-node='v:customers_clean@1']").click()
    page.wait_for_url("**/ui/data/customers_clean/versions/1")


def test_labeling_with_number_keys_stores_the_label_and_shows_the_next_row(
    sign_in: Callable[..., Any], dashboard: Any, screenshot: Callable[..., Any]
) -> None:
    from aifab.data import label_history

    page = sign_in("developer")
    page.goto(dashboard.url + "/ui/data/customers_labeled/label")
    item = page.locator("#label-item").get_attribute("data-item-key")
    first = page.locator("button[data-label-key='1']")
    choice = first.get_attribute("value")
    assert item and choice in ("churn", "stay")
    screenshot(page, "data-label")
    with page.expect_navigation():
        page.keyboard.press("1")
    mine = [
        h for h in label_history("customers_labeled") if h["item_key"] == item
    ]  # seen through the service, as `aifab data label-history` shows it
    assert [(h["label"], h["labeler"]) for h in mine] == [
        (choice, f"key:{dashboard.key_ids['developer']}")
    ]
    assert page.locator("#label-item").get_attribute("data-item-key") != item
    assert item in page.locator("section", has_text="Latest labels given").inner_text()


def test_a_viewer_gets_no_label_form_and_its_post_is_refused(
    sign_in: Callable[..., Any], dashboard: Any
) -> None:
    from aifab.data import label_history

    before = len(label_history("customers_labeled"))
    page = sign_in("viewer")
    page.goto(dashboard.url + "/ui/data/customers_labeled/label")
    assert page.locator("#label-item").is_visible()
    assert page.locator("form[data-label-form]").count() == 0
    assert page.locator("button[data-label-key]").count() == 0
    page.keyboard.press("1")
    item = page.locator("#label-item").get_attribute("data-item-key")
    token = page.evaluate("document.body.dataset.csrf")
    reply = page.request.post(
        dashboard.url + "/ui/data/customers_labeled/label",
        form={"csrf": token, "item_key": item or "", "label": "stay"},
        headers={"Origin": dashboard.url},
        max_redirects=0,
    )
    assert reply.status == 403 and "lacks permission" in reply.text()
    assert len(label_history("customers_labeled")) == before


@pytest.mark.parametrize(
    "path", ["/ui/data", "/ui/data/xss_probe", "/ui/data/xss_probe/versions/1",
             "/ui/data/xss_probe/versions/1/lineage", "/ui/data/xss_probe/quarantine"]
)  # fmt: skip
def test_markup_in_values_and_column_names_shows_as_text_and_runs_nothing(
    sign_in: Callable[..., Any],
    dashboard: Any,
    probe: str,
    path: str,
    screenshot: Callable[..., Any],
) -> None:
    page = sign_in("viewer")
    dialogs = _dialogs(page)
    page.goto(dashboard.url + path)
    page.wait_for_load_state("networkidle")
    assert (
        page.locator("img[src='x']").count() == 0
        and page.locator("main script:not([type])").count() == 0
    )
    if path.endswith("/versions/1"):
        preview = page.locator("table.preview")
        assert preview.get_by_text(PROBE_VALUE, exact=True).is_visible()
        assert preview.get_by_role("columnheader", name=PROBE_COLUMN).is_visible()
        assert page.locator("td", has_text="</td></tr><script>alert(2)</script>").count() == 1
        screenshot(page, "data-xss-probe")
    assert dialogs == []


@pytest.mark.parametrize(
    "path", ["/ui/data", "/ui/data/customers_clean", "/ui/data/customers_clean/versions/1",
             "/ui/data/customers_split/versions/1/lineage", "/ui/data/customers_labeled/label",
             "/ui/data/customers_valid/diff?a=customers_clean@1&b=1"]
)  # fmt: skip
def test_data_pages_have_no_serious_accessibility_findings(
    sign_in: Callable[..., Any], axe_findings: Callable[..., Any], dashboard: Any, path: str
) -> None:
    page = sign_in("developer", bypass_csp=True)
    page.goto(dashboard.url + path)
    assert axe_findings(page) == []


def test_an_image_column_previews_as_thumbnails_the_browser_draws(
    sign_in: Callable[..., Any],
    dashboard: Any,
    tmp_path_factory: pytest.TempPathFactory,
    screenshot: Callable[..., Any],
) -> None:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    from aifab.data import ingest

    def png(colour: tuple[int, int, int]) -> bytes:
        buf = io.BytesIO()
        Image.new("RGB", (300, 200), colour).save(buf, format="PNG")
        return buf.getvalue()

    path = tmp_path_factory.mktemp("shots") / "shots.parquet"
    images = pa.array([png((200, 40, 40)), png((40, 40, 200))], pa.binary())
    pq.write_table(pa.table({"id": [1, 2], "image": images}), path)
    ingest("shots", str(path))
    page = sign_in("viewer")
    page.goto(dashboard.url + "/ui/data/shots/versions/1")
    page.wait_for_load_state("networkidle")
    thumbs = page.locator("table.preview img.thumb")
    assert thumbs.count() == 2
    # Decoded by the browser under the page's CSP: a real image, downscaled by the server.
    widths = thumbs.evaluate_all("imgs => imgs.map(i => i.complete ? i.naturalWidth : 0)")
    assert widths == [128, 128]
    screenshot(page, "data-image-thumbnails")
