"""Signing in and the home page, in Debian's chromium against a live server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.integration


def test_sign_in_shows_the_workspace_with_live_deployment_figures(
    sign_in: Callable[..., Any], screenshot: Callable[..., Any], chart_drawn: Callable[..., Any]
) -> None:
    page = sign_in("viewer")
    assert page.get_by_role("heading", name="Workspace", level=1).is_visible()
    row = page.locator("#home-deployments tr", has_text="churn")
    assert row.get_by_text("ready").is_visible()
    cells = row.locator("td").all_inner_texts()
    assert float(cells[3]) > 0, cells  # requests per second over the live window
    assert chart_drawn(page, "spend-chart")
    screenshot(page, "home")


def test_the_deployments_table_refreshes_itself(
    sign_in: Callable[..., Any], dashboard: Any
) -> None:
    page = sign_in("viewer")
    with page.expect_response(lambda r: "/ui/fragments/home-deployments" in r.url, timeout=15_000):
        pass
    assert page.locator("#home-deployments tr", has_text="churn").count() == 1


def test_a_wrong_key_and_a_client_key_are_refused(browser: Any, dashboard: Any) -> None:
    page = browser.new_page()
    try:
        for secret, message in (
            ("aifab-not-a-key", "unknown or revoked"),
            (dashboard.keys["client"], "cannot open the dashboard"),
        ):
            page.goto(dashboard.url + "/ui/login")
            page.get_by_label("API key").fill(secret)
            page.get_by_role("button", name="Sign in").click()
            assert message in page.get_by_role("alert").inner_text()
            assert "/ui/login" in page.url
    finally:
        page.close()


def test_signing_out_and_revoking_the_key_end_the_session(
    sign_in: Callable[..., Any], dashboard: Any
) -> None:
    page = sign_in("viewer")
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/ui/login")
    page.goto(dashboard.url + "/ui")
    assert "/ui/login" in page.url

    from aifab.serve.keys import create_key, revoke_key

    record, secret = create_key("viewer", name="short-lived")
    dashboard.keys["short-lived"] = secret
    page = sign_in("short-lived")
    revoke_key(record["id"])
    page.wait_for_timeout(1200)  # keys are re-read at most a second later, as in the API
    page.goto(dashboard.url + "/ui")
    assert "/ui/login" in page.url


def test_home_and_sign_in_have_no_serious_accessibility_findings(
    sign_in: Callable[..., Any], axe_findings: Callable[..., Any], dashboard: Any
) -> None:
    page = sign_in("viewer", bypass_csp=True)
    assert axe_findings(page) == []
    page.goto(dashboard.url + "/ui/login")
    assert axe_findings(page) == []


def test_keyboard_reaches_the_content_first(sign_in: Callable[..., Any]) -> None:
    page = sign_in("viewer")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("location.hash") == "#main"


def test_pages_load_without_console_errors_and_ui_slash_is_home(
    sign_in: Callable[..., Any], dashboard: Any
) -> None:
    page = sign_in("viewer")
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    failed: list[str] = []
    page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    page.goto(dashboard.url + "/ui/")  # a trailing slash, as people type it
    assert page.get_by_role("heading", name="Workspace", level=1).is_visible()
    page.goto(dashboard.url + "/ui/jobs")
    page.wait_for_load_state("load")
    assert errors == [] and failed == [], (errors, failed)
    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert icon and page.request.get(dashboard.url + icon).status == 200
