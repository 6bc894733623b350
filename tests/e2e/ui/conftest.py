"""The dashboard in a real browser: Debian's chromium driven by Playwright, against a live server.

Each test module gets a workspace that ran the quickstart (``churn@champion`` deployed as
``churn`` with some traffic), a real uvicorn server, keys of every role, and a headless
chromium. Chromium comes from the Debian package (``make test`` installs it when it can):
Playwright's own browser download does not work offline. Screenshots go to
``.artifacts/screenshots`` (or ``$AIFAB_TEST_ARTIFACTS/screenshots``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration

_REPO = Path(__file__).resolve().parents[3]
ARTIFACTS = Path(os.environ.get("AIFAB_TEST_ARTIFACTS", _REPO / ".artifacts")) / "screenshots"
AXE = Path(__file__).with_name("vendor") / "axe.min.js"
# Without the background-networking flags chromium keeps dialling Google's hosts, which this
# closed network refuses; --no-sandbox because CI runs as root.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """Debian's chromium, or AIFAB_CHROMIUM."""
    return os.environ.get("AIFAB_CHROMIUM") or shutil.which("chromium")


@dataclass
class Dashboard:
    """A server with the quickstart deployed, and a secret per role."""

    url: str
    keys: dict[str, str]
    key_ids: dict[str, str]

    def api(self, method: str, path: str, role: str = "admin", **kwargs: Any) -> httpx.Response:
        """Call the HTTP API with a role's key (to check what the UI did)."""
        headers = {"Authorization": f"Bearer {self.keys[role]}"}
        return httpx.request(method, self.url + path, headers=headers, timeout=60, **kwargs)


@pytest.fixture
def workspace(module_workspace: Path) -> Path:
    """Browser tests share their module's workspace."""
    return module_workspace


@pytest.fixture(scope="module")
def dashboard(churn_model: dict[str, Any], live_server: Callable[..., Any]) -> Dashboard:
    """The quickstart deployed as ``churn``, served live, with keys of every role and traffic."""
    from aifab.serve.keys import create_key

    # The quickstart pipeline ends by deploying churn@champion as ``churn``.
    keys, ids = {}, {}
    for role in ("admin", "developer", "viewer", "client"):
        record, secret = create_key(role, name=f"{role}-ui", rate=None)
        keys[role], ids[role] = secret, record["id"]
    server = live_server(reconcile_interval_s=0.2)
    board = Dashboard(server.url, keys, ids)
    chunks = _quickstart_rows(40, chunk=8)
    for rows in chunks:
        reply = board.api("POST", "/v1/predict/churn", "client", json={"records": rows})
        assert reply.status_code == 200, reply.text
    _wait_for_request_log("churn", len(chunks))
    from aifab.ops import collect

    collect()  # the request log's compute time becomes this week's spend
    return board


def _wait_for_request_log(deployment: str, n: int, timeout_s: float = 60.0) -> None:
    """Wait until the server's request log holds ``n`` requests of ``deployment``.

    The log is written by a background thread off the request path: on a fast machine the
    first page could otherwise be drawn before any of this traffic is in it.
    """
    import time

    from aifab.inference.request_log import recent_requests

    deadline = time.monotonic() + timeout_s
    while len(recent_requests(deployment, limit=n)) < n:
        assert time.monotonic() < deadline, f"request log: fewer than {n} {deployment} requests"
        time.sleep(0.1)


def _quickstart_rows(n: int, chunk: int) -> list[list[dict[str, Any]]]:
    """Rows of the model's training data, as a client would send them, in chunks."""
    import json

    from aifab.data import head
    from aifab.inference.loading import shared_model

    columns = list(shared_model("churn@champion").handler.input_columns)
    table = head("customers_clean", n).select(columns)
    rows = json.loads(json.dumps(table.to_pylist(), default=str))
    return [rows[i : i + chunk] for i in range(0, len(rows), chunk)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless chromium for the module (skipped, naming the reason, where none exists)."""
    executable = chromium_path()
    if executable is None:
        pytest.skip("no chromium: install Debian's package (apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    # expect() retries for 5 s by default, actions and waits for 30 s: a loaded 2-core
    # machine can take longer than 5 s to load a page, so assertions wait as long as actions.
    expect.set_options(timeout=30_000)
    with sync_playwright() as pw:
        found = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield found
        found.close()


@pytest.fixture
def sign_in(browser: Any, dashboard: Dashboard) -> Iterator[Callable[..., Any]]:
    """``sign_in(role)``: a new browser page signed in with that role's key, on the home page."""
    contexts: list[Any] = []

    def open_as(role: str, *, bypass_csp: bool = False) -> Any:
        context = browser.new_context(
            bypass_csp=bypass_csp, viewport={"width": 1280, "height": 900}
        )
        contexts.append(context)
        page = context.new_page()
        page.goto(dashboard.url + "/ui")
        page.get_by_label("API key").fill(dashboard.keys[role])
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(dashboard.url + "/ui")
        return page

    yield open_as
    for context in contexts:
        context.close()


@pytest.fixture
def screenshot() -> Callable[[Any, str], Path]:
    """``screenshot(page, name)``: save a full-page screenshot as a test artifact."""
    return _screenshot


def _screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture
def axe_findings() -> Callable[[Any], list[dict[str, Any]]]:
    """``axe_findings(page)``: axe-core's serious and critical violations on the page.

    The page must come from ``sign_in(role, bypass_csp=True)``: axe is injected as a script.
    """
    return _serious_axe_findings


def _serious_axe_findings(page: Any) -> list[dict[str, Any]]:
    page.add_script_tag(path=str(AXE))
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:5]}
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]


@pytest.fixture
def chart_drawn() -> Callable[[Any, str], bool]:
    """``chart_drawn(page, canvas_id)``: whether that chart drew (non-blank canvas pixels)."""
    return _chart_drawn


def _chart_drawn(page: Any, canvas_id: str) -> bool:
    page.wait_for_selector(f"#{canvas_id}[data-drawn]", timeout=10_000)
    return bool(
        page.evaluate(
            """(id) => {
                const c = document.getElementById(id);
                if (!c || !c.dataset.drawn || c.width === 0 || c.height === 0) return false;
                const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                for (let i = 3; i < px.length; i += 4) if (px[i] !== 0) return true;
                return false;
            }""",
            canvas_id,
        )
    )
