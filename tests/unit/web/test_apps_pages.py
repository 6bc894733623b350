"""The knowledge, prompts, agents, monitoring, alerts, cost and audit pages through the real
app (no browser): sessions, refusals, 404 pages, paging bounds and the audit log's pages.
"""

from __future__ import annotations

import html
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from aifab.core import acting_as, audit_events, session_scope
from aifab.core.audit import AuditEvent, record_event
from aifab.serve.app import create_app
from aifab.web.pages.audit import parse_since

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from web_signin import csrf, sign_in  # noqa: E402

PAGES = [
    "/ui/kb",
    "/ui/prompts",
    "/ui/agents",
    "/ui/monitoring",
    "/ui/alerts",
    "/ui/cost",
    "/ui/audit",
]


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        yield c


def _add_events(n: int, actor: str = "user:bulk") -> None:
    with acting_as(actor), session_scope() as s:
        for i in range(n):
            record_event(s, "bulk.touch", f"thing:{i}", {"i": i})


@pytest.mark.parametrize("path", PAGES)
def test_each_section_needs_a_session_then_renders_in_an_empty_workspace(
    client: TestClient, path: str
) -> None:
    r = client.get(path, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
    sign_in(client)
    r = client.get(path)
    assert r.status_code == 200, r.text
    assert r.text.count("<h1") == 1
    assert f'href="{path}" aria-current="page"' in r.text  # the menu lists the section


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/ui/kb/nope", "knowledge base 'nope' not found"),
        ("/ui/prompts/nope", "prompt 'nope' not found"),
        ("/ui/agents/nope", "nope"),
        ("/ui/agents/runs/run_nope", "no agent run"),
        ("/ui/monitoring/nope", "no monitor"),
        ("/ui/monitoring/idle?result=4", "monitor 'idle' has no result 4 with drift"),
    ],
)
def test_unknown_objects_are_404_pages_naming_them(
    client: TestClient, path: str, message: str
) -> None:
    from aifab.ops import create_monitor

    create_monitor("idle", {"deployment": "nowhere"})
    sign_in(client)
    r = client.get(path)
    assert r.status_code == 404
    assert "text/html" in r.headers["content-type"] and message in html.unescape(r.text)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/ui/cost?since=forever", "since &#39;forever&#39;"),
        ("/ui/audit?since=yesterday-ish", "use 30m, 2h, 7d"),
        ("/ui/alerts?state=burning", "use firing or resolved"),
        ("/ui/kb/x?mode=psychic", "mode &#39;psychic&#39;"),
        ("/ui/audit?actor=" + "a" * 600, "at most 500"),
    ],
)
def test_bad_query_arguments_are_400_pages(client: TestClient, path: str, message: str) -> None:
    sign_in(client)
    r = client.get(path)
    assert r.status_code == 400 and message in r.text


def _ids(html: str) -> list[int]:
    body = html.split('id="audit-events"', 1)[1].split("</table>", 1)[0]
    return [int(x) for x in re.findall(r'<td class="num">(\d+)</td>', body)]


def test_the_audit_log_pages_through_many_events_in_the_query(client: TestClient) -> None:
    _add_events(1200)
    sign_in(client)
    newest = audit_events(1)[0]["id"]
    seen: list[int] = []
    url: str | None = "/ui/audit?limit=500"
    while url is not None:
        r = client.get(url)
        assert r.status_code == 200
        ids = _ids(r.text)
        assert len(ids) <= 500
        seen += ids
        found = re.search(r'<a href="([^"]+)" rel="next">', r.text)
        url = found[1].replace("&amp;", "&") if found else None
    assert seen == list(range(newest, 0, -1))  # every event once, newest first, no gaps


def test_paging_arguments_are_bounded(client: TestClient) -> None:
    _add_events(30)
    sign_in(client)
    everything = len(audit_events(1000))
    r = client.get("/ui/audit?limit=100000")  # clamped to 500
    assert r.status_code == 200 and len(_ids(r.text)) == everything
    assert 'rel="prev"' not in r.text and 'rel="next"' not in r.text
    r = client.get("/ui/audit?limit=nope")
    assert r.status_code == 200 and len(_ids(r.text)) == min(50, everything)
    r = client.get("/ui/audit?before=1")  # past the oldest: empty, with a way back
    assert "No event matches." in r.text and 'rel="prev"' in r.text
    for bad in ("-3", "x", "9" * 30):
        r = client.get(f"/ui/audit?before={bad}")
        assert r.status_code == 400 and "expected an event number" in r.text
    r = client.get("/ui/agents?offset=-5&limit=0")
    assert r.status_code == 200


def test_audit_pages_go_back_and_forth_by_event_id(client: TestClient) -> None:
    _add_events(25)
    sign_in(client)
    newest = audit_events(1)[0]["id"]
    first = _ids(client.get("/ui/audit?limit=10").text)
    assert first == list(range(newest, newest - 10, -1))
    second = _ids(client.get(f"/ui/audit?limit=10&before={first[-1]}").text)
    assert second == list(range(newest - 10, newest - 20, -1))
    r = client.get(f"/ui/audit?limit=10&after={second[0]}")
    assert _ids(r.text) == first and 'rel="prev"' not in r.text and 'rel="next"' in r.text
    # The service pages in SQL, by id or by offset.
    assert [e["id"] for e in audit_events(3, before=5)] == [4, 3, 2]
    assert [e["id"] for e in audit_events(3, after=5)] == [8, 7, 6]
    assert [e["id"] for e in audit_events(2, offset=3)] == [newest - 3, newest - 4]


def test_the_audit_filters_combine(client: TestClient) -> None:
    _add_events(5, actor="user:alice")
    _add_events(7, actor="user:bob")
    sign_in(client)
    r = client.get("/ui/audit", params={"actor": "user:alice", "object": "thing:", "since": "1h"})
    assert len(_ids(r.text)) == 5
    r = client.get("/ui/audit", params={"actor": "user:bob", "object": "thing:6"})
    assert len(_ids(r.text)) == 1
    r = client.get("/ui/audit", params={"action": "bulk.", "since": "2000-01-01"})
    assert len(_ids(r.text)) == 12
    r = client.get("/ui/audit", params={"action": "bulk.", "since": "2999-01-01"})
    assert "No event matches." in r.text


def test_parse_since_reads_ages_and_dates() -> None:
    assert parse_since("2h", now=10_000.0) == 10_000.0 - 7200
    assert parse_since("2026-12-01") == 1796083200.0
    assert parse_since(" ") is None


def test_the_chain_is_verified_on_demand_and_a_broken_chain_is_shown(client: TestClient) -> None:
    _add_events(20)
    sign_in(client)
    assert "Not verified since the server started" in client.get("/ui/audit").text
    r = client.get("/ui/audit/verify")
    assert r.status_code == 200 and "intact" in r.text
    events = audit_events(1)[0]["id"]
    assert f"up to event #{events}" in r.text
    _add_events(1)
    assert f"Events after #{events} are not verified yet" in client.get("/ui/audit").text
    with session_scope() as s:  # someone edits the log behind the service's back
        ev = s.get(AuditEvent, 3)
        assert ev is not None
        ev.actor = "user:mallory"
    r = client.get("/ui/audit/verify")
    assert "The chain is broken" in r.text and "event 3" in r.text


def test_a_viewer_sees_no_silence_form_and_the_route_refuses(client: TestClient) -> None:
    sign_in(client, "viewer")
    r = client.get("/ui/alerts")
    assert 'id="silence-form"' not in r.text and "/ui/alerts/silence" not in r.text
    fields = {"csrf": csrf(client), "rule": "data_drift", "duration": "1 hour"}
    r = client.post("/ui/alerts/silence", data=fields, follow_redirects=False)
    assert r.status_code == 403 and "lacks permission &#39;deploy&#39;" in r.text
    from aifab.ops import list_silences

    assert list_silences() == []


def test_a_developer_silences_alerts_as_their_key(client: TestClient) -> None:
    record = sign_in(client, "developer").record
    assert 'id="silence-form"' in client.get("/ui/alerts").text
    fields = {"rule": "data_drift", "monitor": "churn-watch", "duration": "4 hours"}
    r = client.post("/ui/alerts/silence", data=fields, follow_redirects=False)
    assert r.status_code == 403 and "CSRF" in r.text  # no token, no change
    fields["csrf"] = csrf(client)
    for bad, message in (
        ({"duration": "forever"}, "duration &#39;forever&#39;"),
        ({"rule": "", "monitor": ""}, "needs a rule, a monitor"),
    ):
        r = client.post("/ui/alerts/silence", data={**fields, **bad}, follow_redirects=False)
        assert r.status_code == 400 and message in r.text
    r = client.post(
        "/ui/alerts/silence", data={**fields, "reason": "<b>deploying</b>"}, follow_redirects=False
    )
    assert r.status_code == 303 and r.headers["location"] == "/ui/alerts"
    from aifab.ops import list_silences

    [silence] = list_silences()
    assert silence["rule"] == "data_drift" and silence["monitor"] == "churn-watch"
    assert silence["created_by"] == f"key:{record['id']}"
    event = audit_events(1, "alerts.silence")[0]
    assert event["actor"] == f"key:{record['id']}"
    page = client.get("/ui/alerts").text
    assert "&lt;b&gt;deploying&lt;/b&gt;" in page and "in force" in page


def test_asking_a_knowledge_base_needs_invoke_and_an_allowed_chat_model(
    client: TestClient,
) -> None:
    sign_in(client, "viewer")
    r = client.get("/ui/kb/docs", params={"question": "why?", "chat": "lm"})
    assert r.status_code == 403 and "invoke" in r.text
    sign_in(client, "developer")
    r = client.get("/ui/kb/docs", params={"question": "why?", "chat": "http://evil.example/v1"})
    assert r.status_code == 403 and "not an allowed chat URL" in r.text
    r = client.get("/ui/kb/docs", params={"question": "why?"})
    assert r.status_code == 400 and "chat" in r.text


def test_audit_prefixes_are_literal_and_case_sensitive() -> None:
    with acting_as("user:x"), session_scope() as s:
        for obj in ("model:a_b@1", "model:axb@1", "Model:a_b@2", "model:a%b@1"):
            record_event(s, "model.touch", obj)
    assert [e["object"] for e in audit_events(10, obj="model:a_b")] == ["model:a_b@1"]
    assert [e["object"] for e in audit_events(10, obj="model:a%")] == ["model:a%b@1"]
    assert len(audit_events(10, "model.")) == 4 and audit_events(10, "Model.") == []
