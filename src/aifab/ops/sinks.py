"""Alert sinks as a Protocol plus a registry by name: ``log`` and ``webhook``.

A webhook is a JSON POST signed with HMAC-SHA256 (header ``X-Aifab-Signature: sha256=<hex>``
over ``<timestamp>.<body>``, timestamp in ``X-Aifab-Timestamp``), retried with backoff on
timeouts, connection errors and 5xx answers. A sink reports what happened; it never raises.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from aifab.core.registry import Registry

__all__ = ["SINKS", "Delivery", "Sink", "sign"]

log = logging.getLogger("aifab.ops.alerts")


@dataclass(frozen=True)
class Delivery:
    """How one notification went."""

    ok: bool
    attempts: int
    error: str | None = None


@runtime_checkable
class Sink(Protocol):
    """Somewhere notifications go."""

    def send(self, payload: Mapping[str, Any], options: Mapping[str, Any]) -> Delivery:
        """Deliver ``payload``; report failure instead of raising."""


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header value of ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


class LogSink:
    """Writes each notification to the ``aifab.ops.alerts`` logger."""

    def send(self, payload: Mapping[str, Any], options: Mapping[str, Any]) -> Delivery:
        """Log one line per alert."""
        for a in payload.get("alerts", []):
            log.warning("alert %s %s on %s: %s", a["state"], a["rule"], a["monitor"], a["message"])
        return Delivery(True, 1)


class WebhookSink:
    """POSTs the notification as JSON, signed, with retries and exponential backoff.

    Options: ``url``; ``secret_env`` (the environment variable holding the HMAC secret);
    ``timeout_s`` (default 5); ``retries`` (default 3 extra tries); ``backoff_s`` (default 0.5,
    doubled per try).
    """

    def send(self, payload: Mapping[str, Any], options: Mapping[str, Any]) -> Delivery:
        """Deliver once a 2xx answer comes back, or give up after the retries."""
        import httpx

        url = str(options.get("url") or "")
        if not url:
            return Delivery(False, 0, "webhook sink has no url")
        body = json.dumps(payload, sort_keys=True, default=str).encode()
        ts = str(int(time.time()))
        headers = {"content-type": "application/json", "x-aifab-timestamp": ts}
        secret_env = options.get("secret_env")
        secret = os.environ.get(str(secret_env)) if secret_env else None
        if secret:
            headers["x-aifab-signature"] = sign(secret, ts, body)
        retries = int(options.get("retries", 3))
        backoff = float(options.get("backoff_s", 0.5))
        timeout = float(options.get("timeout_s", 5.0))
        error = "not sent"
        for attempt in range(1, retries + 2):
            try:
                r = httpx.post(url, content=body, headers=headers, timeout=timeout)
                if r.status_code < 300:
                    return Delivery(True, attempt)
                error = f"HTTP {r.status_code}"
                if r.status_code < 500 and r.status_code != 429:
                    return Delivery(False, attempt, error)  # the receiver refuses: retry is futile
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            if attempt <= retries:
                time.sleep(backoff * 2 ** (attempt - 1))
        return Delivery(False, retries + 1, error)


#: Sink type -> class (instantiated per delivery; sinks keep no state).
SINKS = Registry(
    "alert sink", {"log": "aifab.ops.sinks:LogSink", "webhook": "aifab.ops.sinks:WebhookSink"}
)
