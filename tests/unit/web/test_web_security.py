"""The dashboard's sign-in, sessions, CSRF and headers, through the real app (no browser)."""

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


def test_pages_need_a_session_and_send_the_browser_tosign_in(client: TestClient) -> None:
    r = client.get("/ui?x=1", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/ui/login?next=%2Fui%3Fx%3D1"
    r = client.get("/ui/fragments/home-deployments", headers={"HX-Request": "true"})
    assert r.status_code == 204 and r.headers["HX-Redirect"].startswith("/ui/login")


def test_the_session_cookie_is_httponly_strict_and_names_no_secret(client: TestClient) -> None:
    record, secret = create_key("viewer", name="v")
    r = client.post("/ui/login", data={"key": secret}, follow_redirects=False)
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert secret not in cookie and record["id"] in cookie
    assert client.get("/ui").status_code == 200


@pytest.mark.parametrize(
    "tamper",
    [
        lambda v: v.replace(v.split(".")[0], "key_someone_else", 1),
        lambda v: v[:-2] + ("AA" if not v.endswith("AA") else "BB"),
        lambda v: "x" * 500,
        lambda v: "",
    ],
)
def test_forged_or_damaged_cookies_are_not_sessions(client: TestClient, tamper: Any) -> None:
    sign_in(client)
    value = client.cookies.get(session.COOKIE)
    assert value is not None
    client.cookies.clear()
    client.cookies.set(session.COOKIE, tamper(value))
    assert client.get("/ui", follow_redirects=False).status_code == 303


def test_an_expired_session_ends() -> None:
    value = session.issue("key_x", now=0.0)
    assert session.read(value, now=session.MAX_AGE_S - 1) is not None
    assert session.read(value, now=session.MAX_AGE_S + 1) is None


def test_a_revoked_key_ends_its_sessions(client: TestClient) -> None:
    record = sign_in(client).record
    revoke_key(record["id"])
    from aifab.web import auth

    auth._keys.clear()  # the 1 s key cache, as a second passing would
    assert client.get("/ui", follow_redirects=False).status_code == 303


def test_forms_need_the_session_csrf_token_and_this_origin(client: TestClient) -> None:
    sign_in(client)
    r = client.post("/ui/logout", data={"other": "1"}, follow_redirects=False)
    assert r.status_code == 403 and "CSRF" in r.text
    value = client.cookies.get(session.COOKIE)
    assert value is not None
    token = session.csrf_token(session.read(value))  # type: ignore[arg-type]
    r = client.post(
        "/ui/logout",
        data={"csrf": token},
        headers={"Origin": "http://evil.example"},
        follow_redirects=False,
    )
    assert r.status_code == 403 and "another site" in r.text
    r = client.post("/ui/logout", data={"csrf": token}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"


@pytest.mark.parametrize(
    "target", ["//evil.example/x", "https://evil.example", "/ui//evil", "/v1/keys"]
)
def test_sign_in_never_redirects_off_the_dashboard(client: TestClient, target: str) -> None:
    _, secret = create_key("viewer", name="v")
    r = client.post("/ui/login", data={"key": secret, "next": target}, follow_redirects=False)
    assert r.headers["location"] == "/ui"


def test_client_keys_and_huge_forms_are_refused(client: TestClient) -> None:
    _, secret = create_key("client", name="c")
    r = client.post("/ui/login", data={"key": secret})
    assert r.status_code == 401 and "cannot open the dashboard" in r.text
    r = client.post("/ui/login", data={"key": "x" * 70_000})
    assert r.status_code == 413
    r = client.post("/ui/login", json={"key": secret})
    assert r.status_code == 415


def test_pages_send_a_strict_content_security_policy(client: TestClient) -> None:
    sign_in(client)
    r = client.get("/ui")
    csp = r.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert r.headers["x-frame-options"] == "DENY"
    assert "<script>" not in r.text  # every script is a file under /ui/static


@pytest.mark.parametrize("name", ["../__init__.py", "..%2F__init__.py", ".hidden.js", "x.py"])
def test_static_files_are_only_packaged_assets(client: TestClient, name: str) -> None:
    assert client.get(f"/ui/static/{name}").status_code == 404
    r = client.get("/ui/static/vendor/chart.umd.min.js")
    assert r.status_code == 200 and "immutable" in r.headers["cache-control"]


def test_an_unknown_dashboard_url_is_a_page_and_a_menu_label_leads_to_its_section(
    client: TestClient,
) -> None:
    sign_in(client)
    r = client.get("/ui/knowledge", follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/ui/kb"
    r = client.get("/ui/no-such-page")
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
    assert "no dashboard page at /ui/no-such-page" in r.text


def test_static_misses_are_not_remembered_and_odd_names_are_404(client: TestClient) -> None:
    """Issue 19 item 7: misses grew a cache without bound; a 260-char name was a 500."""
    from aifab.web import static_files

    for name in ("a" * 260 + ".js", "b/" * 200 + "x.css", "x" * 5000 + ".txt", "%00.js"):
        r = client.get(f"/ui/static/{name}")
        assert r.status_code == 404, (name[:20], r.status_code)
        assert r.json()["error"]["message"].startswith("no static file")
        assert len(r.content) < 400  # the name is not echoed back at length
    before = static_files._read.cache_info().currsize
    for i in range(300):
        assert client.get(f"/ui/static/missing-{i}.js").status_code == 404
    assert static_files._read.cache_info().currsize == before
    assert client.get("/ui/static/app.css").status_code == 200
