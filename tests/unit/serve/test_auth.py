"""``require(*permissions)`` on a tiny app: 401, 403, 429 (rate and quota), no key in logs."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from fastapi import Depends, FastAPI, Request
from fastapi.testclient import TestClient

from aifab.serve.auth import KeyCache, Principal, forget_keys, require
from aifab.serve.errors import install_error_handlers
from aifab.serve.keys import create_key, revoke_key
from aifab.serve.limits import RateLimiter, TokenQuota


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def app(clock: Clock) -> Iterator[FastAPI]:
    app = FastAPI()
    install_error_handlers(app)
    app.state.limiter = RateLimiter(clock=clock)
    app.state.quota = TokenQuota()
    app.state.key_cache = KeyCache(ttl_s=60.0)

    @app.post("/invoke")
    def invoke(p: Principal = Depends(require("invoke"))) -> dict[str, str]:
        app.state.quota.add(p.key_id, 10)
        return {"key": p.key_id, "role": p.role, "actor": p.actor}

    @app.get("/read")
    def read(request: Request, p: Principal = Depends(require("read"))) -> dict[str, str]:
        assert request.state.principal == p
        return {"role": p.role}

    @app.get("/keys", dependencies=[Depends(require("keys"))])
    def keys() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/either")
    def either(p: Principal = Depends(require("read", "invoke"))) -> dict[str, str]:
        return {"role": p.role}

    @app.get("/manage", dependencies=[Depends(require("keys", "deploy"))])
    def manage() -> dict[str, bool]:
        return {"ok": True}

    yield app
    app.state.quota.close()


@pytest.fixture
def client(app: FastAPI) -> TestClient:
    return TestClient(app)


def _bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_no_key_and_unknown_key_are_401(client: TestClient) -> None:
    r = client.post("/invoke")
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"] == "Bearer"
    assert r.json()["error"]["type"] == "authentication_error"
    assert "missing API key" in r.json()["error"]["message"]
    r = client.post("/invoke", headers=_bearer("aifab-made-up"))
    assert r.status_code == 401 and "invalid or revoked" in r.json()["error"]["message"]
    r = client.post("/invoke", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert r.status_code == 401


def test_bearer_and_x_api_key_both_work(client: TestClient) -> None:
    key, secret = create_key("client", name="app")
    r = client.post("/invoke", headers=_bearer(secret))
    assert r.status_code == 200, r.text
    assert r.json() == {"key": key["id"], "role": "client", "actor": f"key:{key['id']}"}
    assert client.post("/invoke", headers={"X-API-Key": secret}).status_code == 200


def test_revoked_key_is_401(app: FastAPI, client: TestClient) -> None:
    key, secret = create_key("admin")
    assert client.get("/keys", headers=_bearer(secret)).status_code == 200
    revoke_key(key["id"])
    forget_keys(app)  # the cache would otherwise keep the key for its ttl
    r = client.get("/keys", headers=_bearer(secret))
    assert r.status_code == 401 and "revoked" in r.json()["error"]["message"]


def test_revocation_is_seen_when_the_cache_expires(app: FastAPI, client: TestClient) -> None:
    app.state.key_cache = KeyCache(ttl_s=0)  # ttl 0: every request re-reads the key
    key, secret = create_key("viewer")
    assert client.get("/read", headers=_bearer(secret)).status_code == 200
    revoke_key(key["id"])
    assert client.get("/read", headers=_bearer(secret)).status_code == 401


@pytest.mark.parametrize(
    ("role", "path", "method", "permission"),
    [
        ("viewer", "/invoke", "post", "invoke"),
        ("client", "/read", "get", "read"),
        ("developer", "/keys", "get", "keys"),
    ],
)
def test_wrong_role_is_403_naming_role_and_permission(
    client: TestClient, role: str, path: str, method: str, permission: str
) -> None:
    _, secret = create_key(role)
    r = client.request(method, path, headers=_bearer(secret))
    assert r.status_code == 403
    error = r.json()["error"]
    assert error["type"] == "permission_error"
    assert f"role {role!r}" in error["message"] and f"permission {permission!r}" in error["message"]


def test_roles_allow_what_they_should(client: TestClient) -> None:
    allowed = {
        "admin": ("/invoke", "/read", "/keys"),
        "developer": ("/invoke", "/read"),
        "viewer": ("/read",),
        "client": ("/invoke",),
    }
    for role, paths in allowed.items():
        _, secret = create_key(role, rate=None)
        for path in paths:
            method = "post" if path == "/invoke" else "get"
            assert client.request(method, path, headers=_bearer(secret)).status_code == 200


def test_over_rate_is_429_with_retry_after(client: TestClient, clock: Clock) -> None:
    _, secret = create_key("client", rate="2/min")  # a burst of 2, then one every 30 s
    assert client.post("/invoke", headers=_bearer(secret)).status_code == 200
    assert client.post("/invoke", headers=_bearer(secret)).status_code == 200
    r = client.post("/invoke", headers=_bearer(secret))
    assert r.status_code == 429
    assert r.headers["Retry-After"] == "30"
    assert r.json()["error"]["type"] == "rate_limit_error"
    assert "rate limit" in r.json()["error"]["message"]
    clock.t += 30
    assert client.post("/invoke", headers=_bearer(secret)).status_code == 200
    _, other = create_key("client", rate="2/min")
    assert client.post("/invoke", headers=_bearer(other)).status_code == 200  # its own bucket


def test_token_quota_is_429_until_midnight(client: TestClient) -> None:
    _, secret = create_key("client", rate=None, token_quota=20)
    assert client.post("/invoke", headers=_bearer(secret)).status_code == 200  # uses 10
    assert client.post("/invoke", headers=_bearer(secret)).status_code == 200  # uses 10
    r = client.post("/invoke", headers=_bearer(secret))
    assert r.status_code == 429
    assert 1 <= int(r.headers["Retry-After"]) <= 86_400
    assert r.json()["error"]["code"] == "token_quota_exceeded"


def test_keys_never_appear_in_logs(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    _, secret = create_key("viewer", rate="1/min")
    _, client_secret = create_key("client")
    for _ in range(3):
        client.get("/read", headers=_bearer(secret))  # 200, then 429s
    client.post("/invoke", headers=_bearer(secret))  # 403
    client.post("/invoke", headers={"X-API-Key": client_secret})
    client.post("/invoke", headers=_bearer("aifab-not-a-real-key"))
    assert caplog.records  # something was logged (httpx, sqlalchemy...)
    assert secret not in caplog.text and client_secret not in caplog.text
    assert "aifab-not-a-real-key" not in caplog.text


def test_any_of_permissions_admits_each_and_names_all_when_denied(client: TestClient) -> None:
    for role in ("admin", "developer", "viewer", "client"):
        _, secret = create_key(role, rate=None)
        r = client.get("/either", headers=_bearer(secret))
        assert r.status_code == 200 and r.json() == {"role": role}
    _, secret = create_key("developer", rate=None)
    assert client.get("/manage", headers=_bearer(secret)).status_code == 200
    _, secret = create_key("viewer", rate=None)
    r = client.get("/manage", headers=_bearer(secret))
    assert r.status_code == 403
    assert "lacks permission 'keys' or 'deploy'" in r.json()["error"]["message"]


def test_any_of_checks_the_quota_only_when_invoke_is_what_grants(client: TestClient) -> None:
    """The first permission the role has is granted; the token quota guards ``invoke``."""
    _, caller = create_key("client", rate=None, token_quota=10)
    _, reader = create_key("developer", rate=None, token_quota=10)
    for secret in (caller, reader):
        assert client.post("/invoke", headers=_bearer(secret)).status_code == 200  # uses 10
    assert client.get("/either", headers=_bearer(caller)).status_code == 429  # via invoke
    assert client.get("/either", headers=_bearer(reader)).status_code == 200  # via read


def test_unknown_permission_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown permission 'fly'"):
        require("fly")
    with pytest.raises(ValueError, match="unknown permission 'fly'"):
        require("read", "fly")
    with pytest.raises(ValueError, match="at least one permission"):
        require()
