"""The chat client keeps its connection: an agent's model calls do not each pay a TCP and TLS setup.

Found by profiling an agent run: every call built a new ``httpx.Client`` (and with it an SSL
context loading the CA bundle, ~5-35 ms) and a new connection.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from aifab.prompts.chat import OpenAIChat


class _Answers(BaseHTTPRequestHandler):
    """A stand-in OpenAI-compatible endpoint (HTTP/1.1 keep-alive) recording client ports."""

    protocol_version = "HTTP/1.1"
    peers: list[int] = []

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.peers.append(self.client_address[1])
        answer = {"choices": [{"message": {"role": "assistant", "content": "ok"}}], "usage": {}}
        body = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[tuple[str, list[int]]]:
    peers: list[int] = []
    handler = type("Handler", (_Answers,), {"peers": peers})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", peers
    server.shutdown()
    server.server_close()


def test_calls_of_one_process_share_a_connection(endpoint: tuple[str, list[int]]) -> None:
    url, peers = endpoint
    chat = OpenAIChat(url, "llm", api_key="k", timeout_s=60)
    for _ in range(3):
        assert chat.complete([{"role": "user", "content": "hi"}], max_tokens=4).text == "ok"
    # A second client object (an agent run makes one per run) reuses the same pool.
    other = OpenAIChat(url, "llm", api_key="k", timeout_s=60)
    assert other.post_json([{"role": "user", "content": "hi"}], max_tokens=4)["choices"]
    assert len(peers) == 4
    assert len(set(peers)) == 1, f"{len(set(peers))} connections for 4 calls"
