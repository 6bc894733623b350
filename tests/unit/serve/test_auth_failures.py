"""Failed authentication is limited per client address (issue 19 item 8): a flood of bogus keys
gets a 429 with ``Retry-After`` before any DB work, while keys that were valid still get in."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import event

from aifab.core.db import get_engine
from aifab.serve.app import create_app
from aifab.serve.auth import Principal, require
from aifab.serve.auth_failures import FAILED_AUTH_BURST, FailedAuthLimiter
from aifab.serve.errors import install_error_handlers
from aifab.serve.keys import SECRET_PREFIX, create_key


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def bogus() -> dict[str, str]:
    return {"Authorization": f"Bearer {SECRET_PREFIX}{secrets.token_urlsafe(24)}"}


class Queries:
    """Counts the statements the metadata DB runs (a real SQLAlchemy event, not a stand-in)."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, *args: Any) -> None:
        self.n += 1


@pytest.fixture
def queries() -> Iterator[Queries]:
    engine = get_engine()
    counter = Queries()
    event.listen(engine, "before_cursor_execute", counter)
    yield counter
    event.remove(engine, "before_cursor_execute", counter)


@pytest.fixture
def api() -> TestClient:
    app = FastAPI()
    install_error_handlers(app)
    clock = Clock()
    app.state.auth_failures = FailedAuthLimiter(burst=5, per_minute=60, clock=clock)
    app.state.clock = clock

    @app.get("/read")
    def read(p: Principal = Depends(require("read"))) -> dict[str, str]:
        return {"role": p.role}

    return TestClient(app)


def test_the_bucket_allows_a_burst_then_refills_at_its_rate() -> None:
    clock = Clock()
    limiter = FailedAuthLimiter(burst=3, per_minute=60, clock=clock)
    for _ in range(3):
        assert limiter.wait("10.0.0.1") is None
        limiter.failed("10.0.0.1")
    assert limiter.wait("10.0.0.1") == pytest.approx(1.0)
    assert limiter.wait("10.0.0.2") is None  # per address
    clock.t += 1.0
    assert limiter.wait("10.0.0.1") is None
    small = FailedAuthLimiter(burst=1, max_clients=2, clock=clock)
    for host in ("a", "b", "c"):
        small.failed(host)
    assert small.wait("a") is None  # forgotten: memory stays bounded
    assert small.wait("c") is not None


def test_a_flood_of_bogus_keys_is_429_before_any_db_work(api: TestClient, queries: Queries) -> None:
    _, good = create_key("viewer", name="good")
    assert api.get("/read", headers={"X-API-Key": good}).status_code == 200
    for _ in range(5):
        assert api.get("/read", headers=bogus()).status_code == 401
    before = queries.n
    for _ in range(50):
        r = api.get("/read", headers=bogus())
        assert r.status_code == 429, r.text
        assert r.json()["error"]["code"] == "auth_rate_limited"
        assert r.headers["Retry-After"] == "1"
    assert queries.n == before  # refused without a lookup
    # A key that was valid lately still works from the throttled address (its cache expires
    # after 1 s; the lookup still decides).
    api.app.state.key_cache.invalidate()  # type: ignore[attr-defined]
    assert api.get("/read", headers={"X-API-Key": good}).status_code == 200
    api.app.state.clock.t += 1.0  # type: ignore[attr-defined]
    assert api.get("/read", headers=bogus()).status_code == 401
    assert api.get("/read", headers=bogus()).status_code == 429


@pytest.fixture
def server() -> Iterator[TestClient]:
    with TestClient(create_app(), base_url="http://127.0.0.1") as c:
        # The real limits on a stopped clock: on a loaded machine 20 failed sign-ins took over
        # 2 s, which regains a failure at 30/min, and the 21st was a 401 instead of a 429.
        c.app.state.auth_failures = FailedAuthLimiter(clock=Clock())  # type: ignore[attr-defined]
        yield c


def test_the_dashboard_sign_in_is_throttled_per_address(server: TestClient) -> None:
    _, good = create_key("viewer", name="web")
    assert server.get("/v1/deployments", headers={"X-API-Key": good}).status_code == 200
    for _ in range(FAILED_AUTH_BURST):
        r = server.post("/ui/login", data={"key": "aifab_sk_wrong"}, follow_redirects=False)
        assert r.status_code == 401
    r = server.post("/ui/login", data={"key": "aifab_sk_wrong"}, follow_redirects=False)
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
    assert "Too many failed sign-ins" in r.text
    # The API shares the address's limit.
    r = server.get("/v1/deployments", headers=bogus())
    assert r.status_code == 429 and r.headers["Retry-After"]
    # A key valid lately still signs in from the throttled address.
    r = server.post("/ui/login", data={"key": good}, follow_redirects=False)
    assert r.status_code == 303


def test_an_ipv6_client_counts_by_its_64_network() -> None:
    """Issue 31 item 10: every address of one /64 shares one budget (a subscriber has them
    all); an IPv4 address mapped into IPv6 counts as itself."""
    app = FastAPI()
    install_error_handlers(app)
    app.state.auth_failures = FailedAuthLimiter(burst=3, per_minute=60, clock=Clock())

    @app.get("/read")
    def read(p: Principal = Depends(require("read"))) -> dict[str, str]:
        return {"role": p.role}

    def attempt(host: str) -> int:
        return TestClient(app, client=(host, 4000)).get("/read", headers=bogus()).status_code

    assert [attempt(f"2001:db8:1:2::{i:x}") for i in range(1, 4)] == [401, 401, 401]
    assert attempt("2001:db8:1:2:ffff:ffff:ffff:ffff") == 429  # same /64, fresh address
    assert attempt("2001:db8:1:3::1") == 401  # the next /64 is someone else
    assert [attempt(h) for h in ("192.0.2.7", "::ffff:192.0.2.7", "192.0.2.7")] == [401] * 3
    assert attempt("::ffff:192.0.2.7") == 429
