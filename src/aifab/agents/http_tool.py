"""``http_get``: fetch a page from an allow-listed host, with size, time and address limits.

Loopback, private, link-local and other non-public addresses are refused unless the agent's
YAML allows them (``allow_private: true``): a model must not be able to reach the server's own
network through a tool. A name is resolved once and the connection goes to the address that was
checked (the name stays in ``Host`` and TLS SNI), so a DNS answer that changes between the check
and the connection (rebinding) cannot reach loopback. An address is judged by what it is
globally routable for: IPv6 forms that embed an IPv4 address (mapped, compatible, 6to4, NAT64)
by that address, any other IPv6 address must be global unicast (so site-local ``fec0::/10`` and
local-use NAT64 ``64:ff9b:1::/48`` are refused). Numeric hosts in non-canonical forms
(``2130706433``, ``0177.0.0.1``, ``127.1``) are refused. Redirects are followed by hand so that
each hop is checked again.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
import socket
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from aifab.agents.tools import Tool, ToolContext, ToolError, tool_from_function
from aifab.core.errors import InvalidInputError

__all__ = ["check_url", "http_get_tool", "is_public_address"]

_MAX_REDIRECTS = 5


def _host_allowed(host: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(host, p.lower()) for p in patterns)


_NUMERIC_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
# IANA allocates only 2000::/3 for global unicast; everything else in IPv6 (site-local fec0::/10,
# local-use NAT64 64:ff9b:1::/48, ULA, link-local, reserved space) is routable at most locally.
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
# Special-purpose registry entries inside 2000::/3 newer than Python 3.11's ``is_global`` table.
_NOT_GLOBAL_SINCE_PY311 = (ipaddress.IPv6Network("3fff::/20"),)  # documentation, RFC 9637


def is_public_address(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``addr`` is globally routable unicast, judging embedded IPv4 addresses too.

    IPv6 must be global unicast (2000::/3) and not marked non-global in IANA's special-purpose
    registry; the forms that carry an IPv4 address (mapped, compatible, 6to4, the well-known
    NAT64 prefix) are judged by that address. Teredo is refused: its client address is obscured.
    """
    if isinstance(addr, ipaddress.IPv6Address):
        embedded = addr.ipv4_mapped or addr.sixtofour
        if embedded is None and (addr in _NAT64 or addr in _IPV4_COMPATIBLE):
            embedded = ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
        if embedded is not None:
            return is_public_address(embedded)
        if addr.teredo is not None or addr not in _GLOBAL_UNICAST:
            return False
        if any(addr in net for net in _NOT_GLOBAL_SINCE_PY311):
            return False
    return addr.is_global and not addr.is_multicast


def check_url(url: str, allow_hosts: list[str], allow_private: bool) -> str:
    """Check a URL and resolve its host once; returns the address to connect to.

    Raises:
        ToolError: not http(s), host not on the allow-list, a numeric host in a non-canonical
            form, or an address that is not public (unless ``allow_private``).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ToolError(f"only http(s) URLs with a host are allowed, not {url[:200]!r}")
    host = parts.hostname.lower()
    if not _host_allowed(host, allow_hosts):
        raise ToolError(f"host {host} is not on this agent's allow-list")
    if ":" not in host and all(_NUMERIC_LABEL.fullmatch(label) for label in host.split(".")):
        try:
            canonical = str(ipaddress.IPv4Address(host)) == host
        except ValueError:
            canonical = False
        if not canonical:
            raise ToolError(f"host {host}: a numeric address in a non-canonical form is refused")
    try:
        infos = socket.getaddrinfo(host, parts.port or 0, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        raise ToolError(f"host {host} does not resolve") from None
    addrs = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    if not addrs:
        raise ToolError(f"host {host} does not resolve")
    for addr in addrs:
        if not allow_private and not is_public_address(addr):
            raise ToolError(f"host {host} resolves to a non-public address ({addr}): refused")
    return str(addrs[0])


def _pinned(url: str, address: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    """``url`` aimed at ``address``, with the name kept for ``Host`` and TLS (SNI, checks)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    ip = f"[{address}]" if ":" in address else address
    netloc = f"{ip}:{parts.port}" if parts.port else ip
    shown = f"[{host}]" if ":" in host else host
    headers = {"Host": f"{shown}:{parts.port}" if parts.port else shown}
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    return urlunsplit(parts._replace(netloc=netloc)), headers, extensions


def http_get_tool(options: dict[str, Any], ctx: ToolContext) -> Tool:
    """Build the ``http_get`` tool from its YAML options.

    Options: ``allow_hosts`` (required; glob patterns such as ``*.example.org``),
    ``allow_private`` (default false), ``max_bytes`` (default 200 kB), ``timeout_s`` (10).
    """
    import httpx

    hosts = options.get("allow_hosts")
    if not hosts or not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise InvalidInputError("http_get tool: option 'allow_hosts' (a list of hosts) is required")
    allow_private = bool(options.get("allow_private", False))
    max_bytes = int(options.get("max_bytes", 200_000))
    timeout_s = float(options.get("timeout_s", 10.0))

    def http_get(url: str) -> dict[str, Any]:
        """Fetch a web page or API response (GET) from an allowed host; returns its text.

        Args:
            url: the full http(s) URL.
        """
        # No proxies from the environment: the request must go to the address just checked.
        with httpx.Client(timeout=timeout_s, follow_redirects=False, trust_env=False) as client:
            for _ in range(_MAX_REDIRECTS + 1):
                address = check_url(url, hosts, allow_private)
                target, headers, extensions = _pinned(url, address)
                try:
                    with client.stream(
                        "GET", target, headers=headers, extensions=extensions
                    ) as resp:
                        if resp.is_redirect and "location" in resp.headers:
                            url = urljoin(url, resp.headers["location"])
                            continue
                        body = bytearray()
                        for chunk in resp.iter_bytes():
                            body += chunk
                            if len(body) > max_bytes:
                                break
                        truncated = len(body) > max_bytes
                        text = bytes(body[:max_bytes]).decode(resp.encoding or "utf-8", "replace")
                        return {
                            "url": url,
                            "status": resp.status_code,
                            "content_type": resp.headers.get("content-type", ""),
                            "text": text,
                            "truncated": truncated,
                        }
                except httpx.HTTPError as exc:
                    raise ToolError(f"GET {url} failed: {exc}") from None
        raise ToolError(f"more than {_MAX_REDIRECTS} redirects")

    return tool_from_function(http_get, name=options.get("name", "http_get"))
