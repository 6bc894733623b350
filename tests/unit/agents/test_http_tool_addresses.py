"""Issue 19, item 4: ``http_get`` connects to the address it checked (no DNS rebinding to
loopback) and refuses loopback however it is spelled; issue 31, item 8: addresses are judged
by global routability (local-use NAT64 and site-local IPv6 are refused)."""

from __future__ import annotations

import http.server
import ipaddress
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from aifab.agents import ToolContext, ToolError
from aifab.agents.http_tool import http_get_tool, is_public_address


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
        "[64:ff9b:1::7f00:1]",
        "[fec0::1]",
    ],
)
def test_loopback_however_spelled_is_refused(host: str) -> None:
    tool = http_get_tool({"allow_hosts": ["*"], "timeout_s": 1}, ToolContext())
    with pytest.raises(ToolError, match="refused"):
        tool.fn(url=f"http://{host}:9/")


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b:1::7f00:1",  # RFC 8215 local-use NAT64 (embeds 127.0.0.1)
        "64:ff9b:1::808:808",  # local-use NAT64 is not global whatever it embeds
        "fec0::1",  # deprecated site-local
        "fc00::1",  # unique local
        "fe80::1",  # link-local
        "ff02::1",  # multicast
        "100::1",  # discard-only
        "2001:db8::1",  # documentation
        "3fff::1",  # documentation (RFC 9637, newer than Python 3.11's table)
        "5f00::1",  # SRv6 SIDs
        "4000::1",  # outside 2000::/3, not allocated for global unicast
        "::",
        "::1",
        "64:ff9b::a00:1",  # well-known NAT64 of 10.0.0.1
        "::ffff:192.168.1.1",
        "224.0.0.1",
        "100.64.0.1",
        "0.0.0.0",
        "169.254.169.254",
    ],
)
def test_addresses_not_globally_routable_are_not_public(address: str) -> None:
    assert not is_public_address(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "2606:4700:4700::1111", "2a00:1450:4001::1", "64:ff9b::808:808", "::ffff:1.1.1.1"],
)
def test_globally_routable_addresses_are_public(address: str) -> None:
    assert is_public_address(ipaddress.ip_address(address))
