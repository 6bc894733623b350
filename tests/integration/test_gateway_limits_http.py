"""Issue 23 item 5 and issue 19 item 13 over HTTP: bursts as users read ``N/min``, bounded
rates and quotas (4xx, never 500), ``x-ratelimit-*`` headers that tell the truth."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aifab.serve.keys import create_key

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def env(module_workspace: Path, live_server: Callable[..., Any]) -> Iterator[dict[str, Any]]:
    admin = create_key("admin", name="limits-admin", rate=None)[1]
    server = live_server()
    yield {"url": server.url, "admin": {"Authorization": f"Bearer {admin}"}}


@pytest.mark.parametrize(
    "body",
    [
        {"role": "client", "token_quota": "99999999999999999999999/day"},
        {"role": "client", "token_quota": 99999999999999999999999},
        {"role": "client", "token_quota": "9" * 5000},
        {"role": "client", "rate": "1e-300/s"},
    ],
)
def test_absurd_rates_and_quotas_are_4xx(env: dict[str, Any], body: dict[str, Any]) -> None:
    r = httpx.post(f"{env['url']}/v1/keys", json=body, headers=env["admin"], timeout=30)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert ("token quota" in error["message"]) or ("rate" in error["message"]), error


def test_three_per_minute_is_a_burst_of_three(env: dict[str, Any]) -> None:
    r = httpx.post(
        f"{env['url']}/v1/keys", json={"role": "viewer", "rate": "3/min"}, headers=env["admin"]
    )
    assert r.status_code == 201, r.text
    key = {"Authorization": f"Bearer {r.json()['key']}"}
    seen = []
    for _ in range(3):
        ok = httpx.get(f"{env['url']}/v1/deployments", headers=key)
        assert ok.status_code == 200, ok.text
        assert ok.headers["x-ratelimit-limit-requests"] == "3"
        seen.append(int(ok.headers["x-ratelimit-remaining-requests"]))
    assert seen == [2, 1, 0]
    refused = httpx.get(f"{env['url']}/v1/deployments", headers=key)
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 20  # one request every 20 s


def test_cli_refuses_a_vanishing_rate(cli: Any) -> None:
    r = cli("keys", "create", "--role", "client", "--rate", "1e-300/s")
    assert r.exit_code != 0 and "at least 1/day" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
