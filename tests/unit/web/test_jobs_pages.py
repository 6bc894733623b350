"""The jobs pages through the real app (no browser): missing jobs, paging bounds, the live log's
event stream, and who may cancel or retry."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from aifab.core import audit_events
from aifab.jobs import get_job, submit
from aifab.jobs.worker import run_until_final
from aifab.serve.app import create_app
from aifab.web import charts

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from web_signin import sign_in  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux processes")


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        yield c


def _job(code: str, name: str = "t") -> dict[str, Any]:
    run = {"command": [sys.executable, "-c", code]}
    return submit({"name": name, "run": run, "resources": {"cpu": 0.25, "memory": "64Mi"}})


def _events(body: str) -> list[tuple[str, str]]:
    """(event, data) pairs of a server-sent events body, as EventSource dispatches them."""
    out = []
    for block in body.split("\n\n"):
        kind, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event: "):
                kind = line[len("event: ") :]
            elif line.startswith("data: "):
                data.append(line[len("data: ") :])
        if data:
            out.append((kind, "\n".join(data)))
    return out


def test_an_unknown_job_is_a_404_page_naming_it(client: TestClient) -> None:
    sign_in(client, "viewer")
    for path in ("/ui/jobs/job_nope", "/ui/jobs/job_nope/logs/stream"):
        r = client.get(path)
        assert r.status_code == 404 and "text/html" in r.headers["content-type"]
        assert "job &#39;job_nope&#39; not found" in r.text


def test_the_list_pages_within_bounds(client: TestClient) -> None:
    sign_in(client, "viewer")
    names = [f"job-{i:02d}" for i in range(5)]
    for name in names:
        _job("print(1)", name)
    r = client.get("/ui/jobs?limit=2")
    assert r.status_code == 200
    assert "job-04" in r.text and "job-03" in r.text and "job-02" not in r.text
    assert 'rel="next"' in r.text and 'rel="prev"' not in r.text
    r = client.get("/ui/jobs?limit=2&offset=4")
    assert "job-00" in r.text and "job-01" not in r.text
    assert 'rel="next"' not in r.text and 'rel="prev"' in r.text
    r = client.get("/ui/jobs?offset=999999999999&limit=-5")  # clamped, not an error
    assert r.status_code == 200 and "No jobs yet" in r.text
    r = client.get("/ui/jobs?offset=abc&limit=zz&state=pending")
    assert r.status_code == 200 and all(n in r.text for n in names)
    r = client.get("/ui/jobs?state=finished")
    assert r.status_code == 400 and "state &#39;finished&#39; is not one of" in r.text
    r = client.get("/ui/jobs?queue=nope")
    assert r.status_code == 400 and "queue &#39;nope&#39; does not exist" in r.text


def test_the_log_stream_of_a_finished_job_sends_it_and_ends(client: TestClient) -> None:
    sign_in(client, "viewer")
    job = _job("print('hello'); print('<script>alert(1)</script>\\r\\nsecond'); print('bye')")
    assert run_until_final(job["id"])["state"] == "succeeded"
    with client.stream("GET", f"/ui/jobs/{job['id']}/logs/stream") as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        body = "".join(r.iter_text())  # returns: the stream ended by itself
    events = _events(body)
    log = "".join(data for kind, data in events if kind == "log")
    assert log == "hello\n<script>alert(1)</script>\nsecond\nbye\n"
    assert events[-1] == ("end", "succeeded")
    assert "id: 1:" in body  # the cursor, for a reconnecting browser's Last-Event-ID
    resumed = client.get(
        f"/ui/jobs/{job['id']}/logs/stream", headers={"Last-Event-ID": f"1:{len('hello') + 1}"}
    )
    assert "hello" not in resumed.text and "bye" in resumed.text


def test_the_job_page_shows_spec_accounting_and_escapes_output(client: TestClient) -> None:
    sign_in(client, "viewer")
    job = _job("print('<img src=x onerror=alert(1)>')", "xss")
    run_until_final(job["id"])
    r = client.get(f"/ui/jobs/{job['id']}")
    assert r.status_code == 200
    assert "&lt;img src=x onerror=alert(1)&gt;" in r.text and "<img src=x" not in r.text
    assert f'data-follow-log="/ui/jobs/{job["id"]}/logs/stream?replica=0"' in r.text
    assert "Accounting" in r.text and "all attempts" in r.text
    assert client.get(f"/ui/jobs/{job['id']}?replica=1").status_code == 400
    assert client.get(f"/ui/jobs/{job['id']}?replica=-1").status_code == 400
    for odd in ("²", "1.5", "+1"):  # "²" is a digit to str.isdigit, not to int()
        r = client.get(f"/ui/jobs/{job['id']}/logs/stream", params={"replica": odd})
        assert r.status_code == 400 and "is not a rank" in r.text
    r = client.get(f"/ui/jobs/{job['id']}/logs/stream", headers={"Last-Event-ID": "²:1".encode()})
    assert r.status_code == 200 and "onerror" in r.text  # an unreadable cursor starts afresh


def test_a_viewer_sees_no_buttons_and_is_refused(client: TestClient) -> None:
    token = sign_in(client, "viewer").csrf
    job = _job("import time; time.sleep(30)")
    page = client.get(f"/ui/jobs/{job['id']}").text
    assert "Cancel job" not in page and f"/ui/jobs/{job['id']}/cancel" not in page
    r = client.post(f"/ui/jobs/{job['id']}/cancel", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 403 and "lacks permission" in r.text
    assert get_job(job["id"])["state"] == "pending"


def test_a_developer_cancels_and_retries_audited_as_their_key(client: TestClient) -> None:
    signed = sign_in(client, "developer")
    record, token = signed.record, signed.csrf
    job = _job("import time; time.sleep(30)")
    page = client.get(f"/ui/jobs/{job['id']}").text
    assert "Cancel job" in page and "Retry job" not in page
    r = client.post(f"/ui/jobs/{job['id']}/cancel", data={"x": "1"}, follow_redirects=False)
    assert r.status_code == 403 and "CSRF" in r.text  # the token is checked first
    r = client.post(f"/ui/jobs/{job['id']}/cancel", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/ui/jobs/{job['id']}"
    assert get_job(job["id"])["state"] == "cancelled"
    r = client.post(f"/ui/jobs/{job['id']}/cancel", data={"csrf": token})
    assert r.status_code == 409 and "already cancelled" in r.text
    assert "Retry job" in client.get(f"/ui/jobs/{job['id']}").text
    r = client.post(f"/ui/jobs/{job['id']}/retry", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 303 and get_job(job["id"])["state"] == "pending"
    actors = {e["action"]: e["actor"] for e in audit_events(action="job.")}
    assert actors["job.cancel"] == actors["job.retry"] == f"key:{record['id']}"


def test_the_timeline_has_a_row_per_worker_and_a_floating_bar_per_attempt() -> None:
    bars = [
        {"lane": "w1", "label": "a #1", "start": 100.0, "end": 103.5, "state": "succeeded"},
        {"lane": "w2", "label": "b #1", "start": 101.0, "end": None, "state": "running"},
        {"lane": "w1", "label": "c #1", "start": 104.0, "end": 103.0, "state": "failed"},
    ]
    spec = charts.timeline(bars, now=110.0)
    assert spec["options"]["indexAxis"] == "y" and spec["data"]["labels"] == ["w1", "w2"]
    data = [d["data"][0] for d in spec["data"]["datasets"]]
    assert data == [
        {"x": [0.0, 3.5], "y": "w1"},
        {"x": [1.0, 10.0], "y": "w2"},  # still running: drawn up to now
        {"x": [4.0, 4.0], "y": "w1"},  # a clock step back never draws a negative bar
    ]
    assert [d["label"] for d in spec["data"]["datasets"]] == ["a #1", "b #1", "c #1"]
    assert spec["data"]["datasets"][2]["backgroundColor"].startswith(charts.STATE_COLOURS["failed"])
    assert charts.timeline([], now=5.0)["data"]["labels"] == []


def test_each_replica_of_a_job_has_its_own_log(client: TestClient) -> None:
    sign_in(client, "viewer")
    run = {"command": [sys.executable, "-c", "import os; print('rank', os.environ['RANK'])"]}
    resources = {"cpu": 0.25, "memory": "64Mi"}
    job = submit({"name": "pair", "run": run, "resources": resources, "replicas": 2})
    assert run_until_final(job["id"])["state"] == "succeeded"
    page = client.get(f"/ui/jobs/{job['id']}?replica=1").text
    assert "Log of replica 1" in page and f"/ui/jobs/{job['id']}?replica=0" in page
    for rank in (0, 1):
        body = client.get(f"/ui/jobs/{job['id']}/logs/stream?replica={rank}").text
        assert [d for k, d in _events(body) if k == "log"] == [f"rank {rank}\n"]
    r = client.get(f"/ui/jobs/{job['id']}/logs/stream?replica=2")
    assert r.status_code == 400 and "ranks 0..1" in r.text


def test_revoking_the_key_ends_its_open_log_streams(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from aifab.serve.keys import revoke_key
    from aifab.web.pages import jobs as pages

    monkeypatch.setattr(pages, "KEY_RECHECK_S", 0.2)
    monkeypatch.setattr(pages, "STREAM_S", 15.0)  # without the recheck it would end only here
    record = sign_in(client, "viewer").record
    job = _job("print(1)")  # no worker: it stays pending, so its stream would stay open
    timer = threading.Timer(0.5, revoke_key, args=(record["id"],))
    timer.start()
    try:
        body = client.get(f"/ui/jobs/{job['id']}/logs/stream").text
    finally:
        timer.cancel()
    assert _events(body)[-1] == ("stop", "the session ended: sign in again")


def test_queues_show_their_share_capability_and_quota_use(client: TestClient) -> None:
    from aifab.jobs import create_queue

    sign_in(client, "viewer")
    create_queue("gold", weight=3, cpu=2, memory="1Gi")
    page = client.get("/ui/jobs").text
    row = page[page.index('href="/ui/jobs?queue=gold"') :].split("</tr>")[0]
    assert "75%" in row and "cpu 2, 1,024 MiB" in row
    assert 'aria-label="capability of queue gold in use">0%' in row
    assert "No live worker" in page
    default = page[page.index('href="/ui/jobs?queue=default"') :].split("</tr>")[0]
    assert "25%" in default and "unlimited" in default
