"""A running server's readiness seen from outside: wait for its ``/readyz`` and say so.

``aifab serve`` prints one line when every deployment has loaded (or failed), and
``aifab deployments wait`` blocks until then, so a script's next request cannot meet a 503
"still loading".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from aifab.core.errors import AifabError

__all__ = ["ReadyTimeoutError", "announce_when_ready", "local_url", "ready_line", "wait_ready"]

#: Seconds between two looks at ``/readyz``.
_POLL_S = 0.2


class ReadyTimeoutError(AifabError):
    """The server did not answer ready in time (not started, or a model still loading)."""

    http_status = 504


def local_url(host: str, port: int) -> str:
    """The URL this machine reaches a server bound to ``host:port`` at (any-address: loopback)."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def wait_ready(
    url: str, *, timeout_s: float, stop: threading.Event | None = None
) -> dict[str, Any] | None:
    """Poll ``url/readyz`` until it answers 200; return its body (None if ``stop`` was set).

    A refused connection counts as "not yet": the server may still be starting.

    Raises:
        ReadyTimeoutError: not ready within ``timeout_s``, naming what it last answered.
    """
    import httpx

    deadline = time.monotonic() + timeout_s
    last = "no answer (is `aifab serve` running there?)"
    with httpx.Client(timeout=5.0) as client:
        while stop is None or not stop.is_set():
            try:
                answer = client.get(f"{url.rstrip('/')}/readyz")
                if answer.status_code == 200:
                    body: dict[str, Any] = answer.json()
                    return body
                pending = answer.json().get("pending") or []
                last = f"still loading {', '.join(pending)}" if pending else "still starting"
            except (httpx.TransportError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise ReadyTimeoutError(f"{url} not ready after {timeout_s:g} s: {last}")
            time.sleep(_POLL_S)
    return None


def ready_line(url: str, body: dict[str, Any]) -> str:
    """The one line that says a server is ready: how many deployments serve, how many failed."""
    serving, failed = int(body.get("serving", 0)), int(body.get("failed", 0))
    line = f"aifab ready on {url}: {serving} deployment{'s' * (serving != 1)} serving"
    if failed:
        line += f", {failed} failed to load (`aifab deployments list` says why)"
    return line


def announce_when_ready(
    url: str, say: Callable[[str], None], stop: threading.Event
) -> threading.Thread:
    """Start a thread that calls ``say(ready_line(...))`` once ``url`` is ready.

    It gives up quietly when ``stop`` is set (the server stopped first).
    """

    def run() -> None:
        try:
            body = wait_ready(url, timeout_s=float("inf"), stop=stop)
        except Exception:  # noqa: BLE001 - announcing is a courtesy; serving goes on without it
            return
        if body is not None:
            say(ready_line(url, body))

    thread = threading.Thread(target=run, name="aifab-ready-announcer", daemon=True)
    thread.start()
    return thread
