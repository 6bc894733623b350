"""The gateway as outside clients read it (issues 23.4, 23.5 and 19.13), on one live server.

Validation failures on the OpenAI routes are OpenAI's 400, read by its SDK; ``N/min`` bursts N
with ``x-ratelimit-*`` headers that tell the truth; absurd rates and quotas are 4xx, never 500.
The server has no deployment: bodies are refused while parsed, before any model is looked up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from tests import live_http

from aifab.serve.keys import create_key

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def env(module_workspace: Path, live_server: Callable[..., Any]) -> Iterator[dict[str, Any]]:
    admin = create_key("admin", name="limits-admin", rate=None)[1]
    secret = create_key("client", name="fidelity", rate=None)[1]
    server = live_server()
    yield {"url": server.url, "admin": {"Authorization": f"Bearer {admin}"}, "key": secret}


@pytest.fixture(scope="module")
def sdk(env: dict[str, Any]) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{env['url']}/v1", api_key=env["key"], max_retries=0)


def test_sdk_raises_bad_request_with_the_param(sdk: openai.OpenAI) -> None:
    calls: list[tuple[Callable[[], Any], str]] = [
        (
            lambda: sdk.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                max_tokens="many",  # type: ignore[arg-type]
            ),
            "max_tokens",
        ),
        (lambda: sdk.chat.completions.create(model="m", messages="hi"), "messages"),  # type: ignore[arg-type]
        (lambda: sdk.completions.create(model="m", prompt="hi", n="x"), "n"),  # type: ignore[arg-type]
        (lambda: sdk.embeddings.create(model="m", input=[{"a": 1}]), "input"),  # type: ignore[list-item]
        (lambda: sdk.responses.create(model="m", input=3), "input"),  # type: ignore[arg-type]
    ]
    for call, param in calls:
        with pytest.raises(openai.BadRequestError) as err:
            call()
        body = err.value.body
        assert isinstance(body, dict), body
        assert err.value.status_code == 400
        assert body["type"] == "invalid_request_error", body
        assert str(body["param"]).startswith(param), body


def test_aifab_routes_keep_422(env: dict[str, Any]) -> None:
    r = live_http.post(
        f"{env['url']}/v1/keys",
        json={"role": 5},
        headers={"Authorization": f"Bearer {env['key']}"},
    )
    assert r.status_code in (403, 422), r.text  # a client key may not make keys: 403 first
    r = live_http.post(
        f"{env['url']}/v1/chat/completions",
        json={"model": "m"},
        headers={"Authorization": f"Bearer {env['key']}"},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text


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
    r = live_http.post(f"{env['url']}/v1/keys", json=body, headers=env["admin"], timeout=30)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert ("token quota" in error["message"]) or ("rate" in error["message"]), error


def test_three_per_minute_is_a_burst_of_three(env: dict[str, Any]) -> None:
    r = live_http.post(
        f"{env['url']}/v1/keys", json={"role": "viewer", "rate": "3/min"}, headers=env["admin"]
    )
    assert r.status_code == 201, r.text
    key = {"Authorization": f"Bearer {r.json()['key']}"}
    seen = []
    for _ in range(3):
        ok = live_http.get(f"{env['url']}/v1/deployments", headers=key)
        assert ok.status_code == 200, ok.text
        assert ok.headers["x-ratelimit-limit-requests"] == "3"
        seen.append(int(ok.headers["x-ratelimit-remaining-requests"]))
    assert seen == [2, 1, 0]
    refused = live_http.get(f"{env['url']}/v1/deployments", headers=key)
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 20  # one request every 20 s


def test_cli_refuses_a_vanishing_rate(cli: Any) -> None:
    r = cli("keys", "create", "--role", "client", "--rate", "1e-300/s")
    assert r.exit_code != 0 and "at least 1/day" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
