"""The jobs pages in Debian's chromium against a live server, with a real worker running jobs.

The live server runs no worker (``aifab serve`` does, in a thread): this module starts one on a
thread of its own, on the same workspace, so tiny shell-like Python jobs really run.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from aifab.core import audit_events
from aifab.jobs import get_job, submit
from aifab.jobs.worker import Worker, WorkerOptions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux processes"),
]

FINAL = ("succeeded", "failed", "cancelled")
TICKS = 4
SLEEPER = "import time; print('started', flush=True); time.sleep(120)"
FAILING = "import sys; print('boom', flush=True); sys.exit(3)"
XSS = "print('<script>alert(1)</script>'); print('<img src=x onerror=alert(1)>')"


@pytest.fixture(scope="module")
def worker(dashboard: Any) -> Iterator[Worker]:
    """A jobs worker on a thread (it outlives the jobs it starts), stopped with the module."""
    w = Worker(WorkerOptions(lease_s=5.0, poll_s=0.05))
    stop = threading.Event()
    thread = threading.Thread(target=w.run, args=(stop,), daemon=True, name="ui-jobs-worker")
    thread.start()
    yield w
    stop.set()
    thread.join(timeout=60)


def run(code: str, name: str) -> str:
    """Submit a tiny Python job; return its id."""
    spec = {"command": [sys.executable, "-c", code]}
    job = submit({"name": name, "run": spec, "resources": {"cpu": 0.25, "memory": "64Mi"}})
    return str(job["id"])


def wait_state(job_id: str, states: tuple[str, ...], timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = get_job(job_id)
        if job["state"] in states:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} not {states} within {timeout} s: {get_job(job_id)}")


def gated_ticker(gates: Path, ticks: int) -> str:
    """A job that prints ``tick i`` and then waits for the file ``go-i`` in ``gates``."""
    return (
        "import os, sys, time\n"
        "give_up = time.monotonic() + 120  # a failed test leaves no job behind\n"
        f"for i in range({ticks}):\n"
        "    print(f'tick {i}', flush=True)\n"
        f"    while not os.path.exists(os.path.join({str(gates)!r}, f'go-{{i}}')):\n"
        "        if time.monotonic() > give_up:\n"
        "            sys.exit(9)\n"
        "        time.sleep(0.02)\n"
    )


def log_lines(page: Any) -> list[str]:
    return [x for x in page.locator("#job-log").inner_text().split("\n") if x]


def test_a_running_jobs_log_follows_live_until_it_finishes(
    worker: Worker,
    dashboard: Any,
    sign_in: Callable[..., Any],
    screenshot: Callable[..., Any],
    tmp_path: Path,
) -> None:
    # The job prints a line, then waits until the test has seen it on the page: each line
    # provably arrives while the job still runs, however slow the machine (counting partial
    # logs seen at a poll rate failed CI under load with counts {4, 6}).
    job_id = run(gated_ticker(tmp_path, TICKS), "ticker")
    wait_state(job_id, ("running",))
    page = sign_in("viewer")
    page.goto(f"{dashboard.url}/ui/jobs/{job_id}")
    log = page.locator("#job-log")
    for i in range(TICKS):
        expect(log).to_contain_text(f"tick {i}")
        assert log_lines(page) == [f"tick {n}" for n in range(i + 1)]
        assert page.locator("#job-log[data-complete]").count() == 0
        assert page.locator("[data-job-state]").inner_text() == "running"
        (tmp_path / f"go-{i}").touch()
    expect(page.locator("#job-log[data-complete]")).to_have_count(1)
    assert log_lines(page) == [f"tick {i}" for i in range(TICKS)]
    assert page.locator("[data-job-state]").inner_text() == "succeeded"  # no reload
    assert "Log complete (job succeeded)" in page.get_by_role("status").inner_text()
    page.reload()
    assert page.get_by_role("heading", name="Accounting").is_visible()
    assert page.get_by_role("region", name="Accounting").get_by_text("all attempts").is_visible()
    screenshot(page, "jobs-job")


def test_a_developer_cancels_a_running_job_through_the_page(
    worker: Worker, dashboard: Any, sign_in: Callable[..., Any]
) -> None:
    job_id = run(SLEEPER, "sleeper")
    wait_state(job_id, ("running",))
    page = sign_in("developer")
    page.goto(f"{dashboard.url}/ui/jobs/{job_id}")
    # A locator wait, not wait_for_function: the page's CSP forbids the eval Playwright's
    # polling of a string predicate needs (a CI run failed on it).
    page.locator("#job-log", has_text="started").wait_for()
    page.once("dialog", lambda dialog: dialog.accept())  # "Cancel job sleeper?"
    with page.expect_response(lambda r: r.url.endswith("/cancel")) as posted:
        page.get_by_role("button", name="Cancel job").click()
    assert posted.value.status == 303
    job = wait_state(job_id, FINAL, timeout=30)
    assert job["state"] == "cancelled" and job["attempts"][-1]["state"] == "cancelled"
    [event] = audit_events(action="job.cancel", obj=f"job:{job_id}")
    assert event["actor"] == f"key:{dashboard.key_ids['developer']}"
    page.reload()
    assert page.locator("[data-job-state]").inner_text() == "cancelled"
    assert page.get_by_role("button", name="Retry job").is_visible()
    assert page.get_by_role("button", name="Cancel job").count() == 0


def test_a_developer_retries_a_failed_job(
    worker: Worker, dashboard: Any, sign_in: Callable[..., Any]
) -> None:
    job_id = run(FAILING, "failing")
    assert wait_state(job_id, FINAL)["state"] == "failed"
    page = sign_in("developer")
    page.goto(f"{dashboard.url}/ui/jobs/{job_id}")
    assert "exit code 3" in page.locator("p", has_text="Why:").inner_text()
    with page.expect_response(lambda r: r.url.endswith("/retry")) as posted:
        page.get_by_role("button", name="Retry job").click()
    assert posted.value.status == 303
    job = wait_state(job_id, FINAL)
    assert job["state"] == "failed" and [a["number"] for a in job["attempts"]] == [1, 2]
    assert "retry" in [e["kind"] for e in job["events"]]
    [event] = audit_events(action="job.retry", obj=f"job:{job_id}")
    assert event["actor"] == f"key:{dashboard.key_ids['developer']}"
    page.reload()
    page.wait_for_selector("#job-log[data-complete]")
    assert log_lines(page) == ["boom"]  # the latest attempt's log


def test_a_viewer_sees_no_buttons_and_the_routes_refuse(
    worker: Worker, dashboard: Any, sign_in: Callable[..., Any]
) -> None:
    failed = run(FAILING, "viewer-failed")
    sleeping = run(SLEEPER, "viewer-sleeper")
    wait_state(failed, FINAL)
    wait_state(sleeping, ("running",))
    page = sign_in("viewer")
    token = page.evaluate("document.body.dataset.csrf")
    for job_id, action in ((sleeping, "cancel"), (failed, "retry")):
        page.goto(f"{dashboard.url}/ui/jobs/{job_id}")
        assert page.get_by_role("button", name="Cancel job").count() == 0
        assert page.get_by_role("button", name="Retry job").count() == 0
        reply = page.request.post(
            f"{dashboard.url}/ui/jobs/{job_id}/{action}",
            form={"csrf": token},
            headers={"Origin": dashboard.url},
        )
        assert reply.status == 403 and "lacks permission" in reply.text()
    assert get_job(sleeping)["state"] == "running" and get_job(failed)["state"] == "failed"
    from aifab.jobs import cancel

    cancel(sleeping)


def test_job_output_is_shown_as_text_and_runs_nothing(
    worker: Worker, dashboard: Any, sign_in: Callable[..., Any]
) -> None:
    job_id = run(XSS, "xss-probe")
    wait_state(job_id, FINAL)
    page = sign_in("viewer", bypass_csp=True)  # only the escaping stands between
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{dashboard.url}/ui/jobs/{job_id}")
    page.wait_for_selector("#job-log[data-complete]")
    assert log_lines(page) == ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>"]
    assert page.locator("#job-log img, #job-log script").count() == 0
    assert page.get_by_text("<img src=x onerror=alert(1)>", exact=False).first.is_visible()
    page.wait_for_timeout(300)
    assert dialogs == []


def test_the_list_shows_queues_a_timeline_and_filters(
    worker: Worker,
    dashboard: Any,
    sign_in: Callable[..., Any],
    screenshot: Callable[..., Any],
    chart_drawn: Callable[..., Any],
) -> None:
    done = run("print('ok')", "list-ok")
    failed = run(FAILING, "list-failed")
    wait_state(done, FINAL)
    wait_state(failed, FINAL)
    page = sign_in("viewer")
    page.get_by_role("link", name="Jobs").click()
    expect(page.get_by_role("heading", name="Jobs", level=1)).to_be_visible()
    queues = page.locator("table.queues")
    assert queues.locator("tr", has_text="default").count() == 1
    assert "live worker" in page.get_by_role("region", name="Queues").inner_text()
    assert chart_drawn(page, "jobs-timeline")
    assert page.locator("table.jobs tr", has_text="list-ok").count() == 1
    screenshot(page, "jobs")
    page.get_by_label("State").select_option("failed")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/ui/jobs?state=failed*")
    states = page.locator("table.jobs tbody td:nth-child(3)").all_inner_texts()
    assert states and set(states) == {"failed"}
    assert page.locator("table.jobs tr", has_text="list-failed").count() == 1
    page.locator("table.jobs a", has_text="list-failed").click()
    page.wait_for_url(f"**/ui/jobs/{failed}")
    assert chart_drawn(page, "job-timeline")


def test_the_jobs_pages_have_no_serious_accessibility_findings(
    worker: Worker, dashboard: Any, sign_in: Callable[..., Any], axe_findings: Callable[..., Any]
) -> None:
    job_id = run("print('fine')", "axe")
    wait_state(job_id, FINAL)
    page = sign_in("viewer", bypass_csp=True)
    page.goto(f"{dashboard.url}/ui/jobs")
    assert axe_findings(page) == []
    page.goto(f"{dashboard.url}/ui/jobs/{job_id}")
    page.wait_for_selector("#job-log[data-complete]")
    assert axe_findings(page) == []
