"""Issue 19, item 4: ``http_get`` connects to the address it checked (no DNS rebinding to
loopback) and refuses loopback however it is spelled."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from aifab.agents import ToolContext, ToolError
from aifab.agents.http_tool import http_get_tool


@pytest.fixture
def loopback_server() -> Iterator[tuple[int, list[str]]]:
    hits: list[str] = []

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            hits.append(self.headers.get("Host", ""))
            self.send_response(200)
            self.send_header("Content-Length", "6")
            self.end_headers()
            self.wfile.write(b"secret")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], hits
    server.shutdown()


def test_a_name_rebound_to_loopback_after_the_check_is_not_reached(
    loopback_server: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """STAND-IN for a rebinding DNS server (none can run here): the resolver answers a public
    address for ``rebind.test`` the first time and loopback every time after."""
    port, hits = loopback_server
    real = socket.getaddrinfo
    answers = iter(["93.184.216.34"])

    def rebinding(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.test":
            return real(next(answers, "127.0.0.1"), *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    tool = http_get_tool({"allow_hosts": ["rebind.test"], "timeout_s": 1}, ToolContext())
    with pytest.raises(ToolError, match="failed"):
        tool.fn(url=f"http://rebind.test:{port}/")
    assert hits == []  # the connection went to the checked address, not loopback


def test_the_checked_address_is_the_one_connected_with_the_name_as_host(
    loopback_server: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """STAND-IN resolver: ``pinned.test`` is loopback (private allowed for this agent)."""
    port, hits = loopback_server
    real = socket.getaddrinfo

    def resolver(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == "pinned.test" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    options = {"allow_hosts": ["pinned.test"], "allow_private": True}
    page = http_get_tool(options, ToolContext()).fn(url=f"http://pinned.test:{port}/")
    assert page["text"] == "secret"
    assert page["url"] == f"http://pinned.test:{port}/"
    assert hits == [f"pinned.test:{port}"]


@pytest.mark.parametrize(
    "host",
    [
        "[::127.0.0.1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
        "[64:ff9b::7f00:1]",
        "[2002:7f00:1::]",
        "2130706433",
        "0177.0.0.1",
        "0x7f.0.0.1",
        "127.1",
        "[::1]",
        "localhost",
    ],
)
def test_loopback_however_spelled_is_refused(host: str) -> None:
    tool = http_get_tool({"allow_hosts": ["*"], "timeout_s": 1}, ToolContext())
    with pytest.raises(ToolError, match="refused"):
        tool.fn(url=f"http://{host}:9/")
