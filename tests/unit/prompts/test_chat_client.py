"""The chat client against stand-in OpenAI-compatible endpoints.

A refused key names the variable it came from (AIFAB_CHAT_API_KEY, or the agent's --key-env),
and calls keep their connection: an agent's model calls once each built a new ``httpx.Client``
(an SSL context loading the CA bundle, ~5-35 ms) and a new connection (found by profiling).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from aifab.core.errors import InvalidInputError
from aifab.prompts.chat import OpenAIChat


def _send_json(handler: BaseHTTPRequestHandler, status: int, payload: dict) -> bytes:
    """Answer ``payload`` as JSON; returns the request body read."""
    request = handler.rfile.read(int(handler.headers.get("content-length", 0)))
    body = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
    return request


class _Refuses(BaseHTTPRequestHandler):
    """A stand-in for an outside OpenAI-compatible endpoint that wants a key."""

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        _send_json(self, 401, {"error": {"message": "missing API key"}})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refuses)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_a_401_names_aifab_chat_api_key(endpoint: str) -> None:
    chat = OpenAIChat(endpoint, "llm", api_key=None, timeout_s=60)
    with pytest.raises(InvalidInputError, match=r"AIFAB_CHAT_API_KEY"):
        chat.complete([{"role": "user", "content": "hi"}], max_tokens=4)


def test_agents_run_through_a_gateway_without_a_key_says_which_variable(
    cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIFAB_API_KEY", raising=False)
    r = cli("agents", "run", "analyst", "hi", "--gateway", "http://127.0.0.1:9/")
    assert r.exit_code != 0
    assert "AIFAB_API_KEY" in r.stderr and "--key-env" in r.stderr


class _Answers(BaseHTTPRequestHandler):
    """A stand-in endpoint (HTTP/1.1 keep-alive) that answers and records ports and bodies."""

    protocol_version = "HTTP/1.1"
    peers: list[int] = []
    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        self.peers.append(self.client_address[1])
        answer: dict[str, Any] = {"choices": [{"message": {"content": "ok"}}], "usage": {}}
        self.bodies.append(json.loads(_send_json(self, 200, answer)))

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[tuple[str, list[int], list[dict[str, Any]]]]:
    peers: list[int] = []
    bodies: list[dict[str, Any]] = []
    handler = type("Handler", (_Answers,), {"peers": peers, "bodies": bodies})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", peers, bodies
    server.shutdown()
    server.server_close()


def test_calls_of_one_process_share_a_connection(answering: tuple[Any, ...]) -> None:
    url, peers, _ = answering
    chat = OpenAIChat(url, "llm", api_key="k", timeout_s=60)
    for _ in range(3):
        assert chat.complete([{"role": "user", "content": "hi"}], max_tokens=4).text == "ok"
    # A second client object (an agent run makes one per run) reuses the same pool.
    other = OpenAIChat(url, "llm", api_key="k", timeout_s=60)
    assert other.post_json([{"role": "user", "content": "hi"}], max_tokens=4)["choices"]
    assert len(peers) == 4
    assert len(set(peers)) == 1, f"{len(set(peers))} connections for 4 calls"


def test_answers_are_greedy_as_in_process_ones(answering: tuple[Any, ...]) -> None:
    """``kb ask --chat URL`` once sampled at the server's default temperature (1): the same
    deployment answered differently through its URL than in-process, where decoding is greedy."""
    url, _, bodies = answering
    chat = OpenAIChat(url, "llm", api_key="k", timeout_s=60)
    chat.complete([{"role": "user", "content": "hi"}], max_tokens=4)
    list(chat.stream([{"role": "user", "content": "hi"}], max_tokens=4))
    assert [b.get("temperature") for b in bodies] == [0.0, 0.0]
