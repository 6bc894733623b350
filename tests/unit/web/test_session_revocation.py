"""Issue 31, item 7: dashboard sessions are revocable on the server.

Logging out cleared the cookie, but a replayed copy of it kept working for 12 hours. A session
now ends for good on sign-out, when its key is revoked, and when an admin signs everyone out.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from aifab.serve.app import create_app
from aifab.serve.keys import create_key, revoke_key
from aifab.web import session

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from web_signin import sign_in  # noqa: E402


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        yield c


def _replay(client: TestClient, value: str) -> int:
    client.cookies.clear()
    client.cookies.set(session.COOKIE, value, path="/ui")
    return client.get("/ui", follow_redirects=False).status_code


def test_a_cookie_replayed_after_logout_is_refused(client: TestClient) -> None:
    signed = sign_in(client)
    value = client.cookies.get(session.COOKIE)
    assert value is not None and client.get("/ui").status_code == 200
    r = client.post("/ui/logout", data={"csrf": signed.csrf}, follow_redirects=False)
    assert r.status_code == 303
    assert _replay(client, value) == 303  # back to the sign-in page


def test_revoking_the_key_ends_its_sessions_at_once(client: TestClient) -> None:
    record = sign_in(client).record
    value = client.cookies.get(session.COOKIE)
    assert value is not None and client.get("/ui").status_code == 200
    revoke_key(record["id"])  # no wait for the server's one-second key cache
    assert _replay(client, value) == 303


def test_an_admin_signs_everyone_out_from_the_cli(client: TestClient, cli: Any) -> None:
    sign_in(client)
    first = client.cookies.get(session.COOKIE)
    sign_in(client, "developer")
    second = client.cookies.get(session.COOKIE)
    assert first is not None and second is not None
    r = cli("keys", "sign-out", "--all")
    assert r.exit_code == 0, r.stderr
    assert "2 dashboard sessions ended" in r.stdout
    assert _replay(client, first) == 303
    assert _replay(client, second) == 303


def test_sign_out_one_key_over_http_leaves_the_others(client: TestClient) -> None:
    ended = sign_in(client)
    ended_value = client.cookies.get(session.COOKIE)
    sign_in(client)
    kept_value = client.cookies.get(session.COOKIE)
    assert ended_value is not None and kept_value is not None
    _, admin = create_key("admin", name="admin")
    auth = {"Authorization": f"Bearer {admin}"}
    r = client.post("/v1/keys/sign-out", json={"key_id": ended.record["id"]}, headers=auth)
    assert r.status_code == 200, r.text
    assert r.json() == {"ended": 1}
    assert _replay(client, ended_value) == 303
    assert _replay(client, kept_value) == 200
    bad = client.post("/v1/keys/sign-out", json={}, headers=auth)
    assert bad.status_code == 422
    _, viewer = create_key("viewer", name="viewer")
    denied = client.post(
        "/v1/keys/sign-out", json={"all": True}, headers={"Authorization": f"Bearer {viewer}"}
    )
    assert denied.status_code == 403
