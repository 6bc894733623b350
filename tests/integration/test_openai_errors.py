"""Issue 23 item 4: validation failures on the OpenAI routes are OpenAI's 400, read by its SDK.

A real server with no deployment: the bodies are refused while they are parsed, before any
model is looked up, so no model needs to load.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from aifab.serve.keys import create_key

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def env(module_workspace: Path, live_server: Callable[..., Any]) -> Iterator[dict[str, Any]]:
    secret = create_key("client", name="fidelity", rate=None)[1]
    server = live_server()
    yield {"url": server.url, "key": secret}


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
    r = httpx.post(
        f"{env['url']}/v1/keys",
        json={"role": 5},
        headers={"Authorization": f"Bearer {env['key']}"},
    )
    assert r.status_code in (403, 422), r.text  # a client key may not make keys: 403 first
    r = httpx.post(
        f"{env['url']}/v1/chat/completions",
        json={"model": "m"},
        headers={"Authorization": f"Bearer {env['key']}"},
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text
