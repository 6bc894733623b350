"""A refused key names the variable it came from: AIFAB_CHAT_API_KEY, or the agent's --key-env."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from aifab.core.errors import InvalidInputError
from aifab.prompts.chat import OpenAIChat


class _Refuses(BaseHTTPRequestHandler):
    """A stand-in for an outside OpenAI-compatible endpoint that wants a key."""

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = json.dumps({"error": {"message": "missing API key"}}).encode()
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

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
    chat = OpenAIChat(endpoint, "llm", api_key=None, timeout_s=5)
    with pytest.raises(InvalidInputError, match=r"AIFAB_CHAT_API_KEY"):
        chat.complete([{"role": "user", "content": "hi"}], max_tokens=4)


def test_agents_run_through_a_gateway_without_a_key_says_which_variable(
    cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIFAB_API_KEY", raising=False)
    r = cli("agents", "run", "analyst", "hi", "--gateway", "http://127.0.0.1:9/")
    assert r.exit_code != 0
    assert "AIFAB_API_KEY" in r.stderr and "--key-env" in r.stderr
