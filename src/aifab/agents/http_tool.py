"""``http_get``: fetch a page from an allow-listed host, with size, time and address limits.

Loopback, private, link-local and other non-public addresses are refused unless the agent's
YAML allows them (``allow_private: true``): a model must not be able to reach the server's own
network through a tool. Redirects are followed by hand so that each hop is checked again.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
from typing import Any
from urllib.parse import urljoin, urlsplit

from aifab.agents.tools import Tool, ToolContext, ToolError, tool_from_function
from aifab.core.errors import InvalidInputError

__all__ = ["check_url", "http_get_tool"]

_MAX_REDIRECTS = 5


def _host_allowed(host: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(host, p.lower()) for p in patterns)


def check_url(url: str, allow_hosts: list[str], allow_private: bool) -> None:
    """Refuse a URL whose scheme, host or resolved addresses are not allowed.

    Raises:
        ToolError: not http(s), host not on the allow-list, or an address that is not public
            (unless ``allow_private``).
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ToolError(f"only http(s) URLs with a host are allowed, not {url[:200]!r}")
    host = parts.hostname.lower()
    if not _host_allowed(host, allow_hosts):
        raise ToolError(f"host {host} is not on this agent's allow-list")
    if allow_private:
        return
    try:
        infos = socket.getaddrinfo(host, parts.port or 0, proto=socket.IPPROTO_TCP)
    except OSError:
        raise ToolError(f"host {host} does not resolve") from None
    for info in infos:
        addr = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if not addr.is_global:
            raise ToolError(f"host {host} resolves to a non-public address ({addr}): refused")


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
        with httpx.Client(timeout=timeout_s, follow_redirects=False) as client:
            for _ in range(_MAX_REDIRECTS + 1):
                check_url(url, hosts, allow_private)
                try:
                    with client.stream("GET", url) as resp:
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
