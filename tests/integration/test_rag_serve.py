"""RAG against a real uvicorn server: ``/v1/kb`` searched and answered with httpx, and
``kb ask`` using the aifab server itself as its OpenAI-compatible chat model (the tiny LM
deployed behind it), so the HTTP chat path runs against aifab, not only a stand-in."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aifab.inference.deployments import create_deployment
from aifab.rag import ask, create_kb
from aifab.serve.keys import create_key

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DOCS = [
    {"id": "deploy", "text": "aifab deploy serves a registered model behind the gateway."},
    {"id": "lake", "text": "The lake keeps dataset versions as immutable Parquet files."},
]


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def env(tiny_lm: dict[str, Any], live_server: Callable[..., Any]) -> Iterator[dict[str, Any]]:
    create_deployment("tiny-lm@1", name="tiny")
    create_kb("served", DOCS)
    _, client = create_key("client", rate=None)
    server = live_server(reconcile_interval_s=0.5)
    yield {"url": server.url, "key": client}
    server.stop()


def test_ask_through_the_aifab_server_as_chat_model(
    env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from aifab.core.errors import InvalidInputError
    from aifab.prompts import create_prompt

    monkeypatch.setenv("AIFAB_CHAT_API_KEY", env["key"])
    chat = f"{env['url']}/v1#tiny"
    # The tiny LM's context is short: the default prompt with two sources does not fit, and
    # the server's 400 comes back as the caller's error naming the context length.
    with pytest.raises(InvalidInputError, match="context length"):
        ask("served", "how do I deploy?", chat=chat, k=2, max_tokens=8)
    create_prompt("tiny-rag", "{{ context }}\nQ: {{ question }}")
    out = ask("served", "deploy?", chat=chat, prompt="tiny-rag", k=1, max_tokens=8)
    assert isinstance(out["answer"], str)
    assert out["citations"][0]["document"] == "deploy"
    assert out["usage"]["completion_tokens"] <= 8
    monkeypatch.setenv("AIFAB_CHAT_API_KEY", "aifab-wrong")
    with pytest.raises(Exception, match="answered 401"):
        ask("served", "deploy?", chat=chat, prompt="tiny-rag", k=1, max_tokens=8)


def test_http_answer_with_a_deployment_streams(env: dict[str, Any]) -> None:
    headers = {"Authorization": f"Bearer {env['key']}"}
    r = httpx.post(
        f"{env['url']}/v1/kb/served/search",
        headers=headers,
        json={"query": "Parquet lake", "k": 1},
        timeout=60,
    )
    assert r.status_code == 200 and r.json()["results"][0]["document"] == "lake"
    body = {"question": "how do I deploy?", "chat": "tiny", "max_tokens": 6, "stream": True}
    with httpx.stream(
        "POST", f"{env['url']}/v1/kb/served/answer", headers=headers, json=body, timeout=120
    ) as r:
        assert r.status_code == 200
        data = [ln[6:] for ln in r.iter_lines() if ln.startswith("data: ")]
    assert data[-1] == "[DONE]"
    events = [json.loads(d) for d in data[:-1]]
    assert events[0]["type"] == "citations" and events[-1]["type"] == "done"
