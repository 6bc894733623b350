"""The request guard: the outermost ASGI middleware of the server.

Before a body is read it authenticates large or chunked requests from their headers (401/403/429
first), refuses a ``Content-Length`` over the route's cap (413) and aborts a streamed body at the
cap while it arrives. It counts every response (route template, method, status), keeps the
in-flight gauge, and adds OpenAI's ``x-ratelimit-*`` headers to successful answers.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aifab.serve.errors import ApiError
from aifab.serve.limits import capacity

__all__ = [
    "BODY_CAPS",
    "DEFAULT_BODY_CAP",
    "DEPLOYMENT_STATE_KEY",
    "PREAUTH_BYTES",
    "RefusedError",
    "RequestGuard",
    "body_cap",
]

_MIB = 1024 * 1024
#: Largest body per route (path prefix, bytes); the first prefix that matches applies.
BODY_CAPS: tuple[tuple[str, int], ...] = (
    ("/v1/predict/", 16 * _MIB),
    ("/v1/datasets/", 16 * _MIB),
    ("/v1/embeddings", 8 * _MIB),
    # Inline documents (the route's MAX_UPLOAD_BYTES) and image queries (max_image_bytes,
    # base64) are bigger than the default; the route names its own caps.
    ("/v1/kb", 32 * _MIB),
    ("/v1/chat/completions", 8 * _MIB),
    ("/v1/completions", 8 * _MIB),
    ("/v1/deployments", 256 * 1024),
    ("/v1/keys", 64 * 1024),
)
#: Any other route.
DEFAULT_BODY_CAP = 1 * _MIB
#: Bodies above this (or chunked ones) are authenticated before the first byte is read;
#: smaller ones cost less to read than a route lookup, and their route authenticates them.
PREAUTH_BYTES = 64 * 1024
#: Where the principal authenticated here waits for the route's ``require`` dependency.
PRINCIPAL_SCOPE_KEY = "aifab.principal"
#: Where a route leaves the deployment that answered (``request.state``), for the metrics.
DEPLOYMENT_STATE_KEY = "aifab_deployment"
#: The route label of a request no route matched (404/405), so scanners cannot grow the labels.
UNMATCHED = "unmatched"


def body_cap(path: str) -> int:
    """The largest body accepted on ``path``, in bytes."""
    return next((cap for prefix, cap in BODY_CAPS if path.startswith(prefix)), DEFAULT_BODY_CAP)


class RefusedError(HTTPException):
    """A request refused while its body was to be read (FastAPI re-raises HTTPExceptions)."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(error.status, error.message, headers=error.headers or None)
        self.code = error.code


class RequestGuard:
    """ASGI middleware guarding and counting every HTTP request of the app it wraps."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one ASGI connection: guard its body, count its response."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        app = scope["app"]
        metrics = getattr(app.state, "metrics", None)
        started = time.perf_counter()
        status = 500  # what an exception escaping the app is answered with
        guarded = _GuardedBody(scope, receive)

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if status < 400:
                    message = _with_limit_headers(app, scope, message)
                elif guarded.refused:  # its body is unread: do not keep the connection
                    message = {**message, "headers": [*message["headers"], _CLOSE]}
            await send(message)

        if metrics is not None:
            metrics.in_flight.inc()
        try:
            await self.app(scope, guarded.receive, send_counted)
        finally:
            if metrics is not None:
                metrics.in_flight.dec()
                route = getattr(scope.get("route"), "path", None) or UNMATCHED
                deployment = scope.get("state", {}).get(DEPLOYMENT_STATE_KEY, "")
                metrics.observe_response(
                    route, scope["method"], status, time.perf_counter() - started, deployment
                )


_CLOSE = (b"connection", b"close")


class _GuardedBody:
    """The request's ``receive``, checked before its first byte and capped while it streams.

    The first read happens once the router has matched the route (``scope["route"]``) and
    before FastAPI parses the body, so the key is checked then, from the headers alone.
    """

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.scope = scope
        self._receive = receive
        self.cap = body_cap(scope["path"])
        self.seen = 0
        self.started = False
        self.refused = False

    async def receive(self) -> Message:
        """The next body message, after the header checks (first call) and within the cap."""
        if not self.started:
            self.started = True
            self._admit()
        message = await self._receive()
        if message["type"] == "http.request":
            self.seen += len(message.get("body", b""))
            if self.seen > self.cap:
                self._refuse(
                    ApiError(413, f"request body is over this route's limit of {self.cap} bytes")
                )
        return message

    def _refuse(self, error: ApiError) -> None:
        self.refused = True
        raise RefusedError(error)

    def _admit(self) -> None:
        """Refuse from the headers alone: the key first, then ``Content-Length``."""
        headers = dict(self.scope["headers"])
        chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
        try:
            length = int(headers.get(b"content-length", b"0"))
        except ValueError:
            self._refuse(ApiError(400, "Content-Length is not a number"))
        if chunked or length > PREAUTH_BYTES:
            try:
                self._preauthorize()
            except ApiError as exc:
                self._refuse(exc)
        if length > self.cap:
            self._refuse(
                ApiError(
                    413,
                    f"request body of {length} bytes is over this route's limit of "
                    f"{self.cap} bytes",
                    code="body_too_large",
                )
            )

    def _preauthorize(self) -> None:
        """Run the matched route's key check now, unless its dependency already ran."""
        from starlette.requests import Request

        from aifab.serve.auth import authorize_headers

        state = self.scope.get("state") or {}
        if state.get("principal") is not None:
            return
        permissions = _find_permissions(getattr(self.scope.get("route"), "dependant", None))
        if permissions is not None:
            principal = authorize_headers(Request(self.scope), permissions)
            self.scope[PRINCIPAL_SCOPE_KEY] = principal


def _find_permissions(dependant: Any) -> tuple[str, ...] | None:
    """The permissions of the ``require(...)`` dependency among a route's dependencies."""
    if dependant is None:
        return None
    for dep in dependant.dependencies:
        found = getattr(dep.call, "aifab_permissions", None) or _find_permissions(dep)
        if found:
            return tuple(found)
    return None


def _with_limit_headers(app: Any, scope: Scope, message: Message) -> Message:
    """OpenAI's ``x-ratelimit-*`` headers for the caller's key, read from the limiters."""
    principal = scope.get("state", {}).get("principal")
    key = getattr(principal, "key", None)
    if key is None:
        return message
    extra: list[tuple[bytes, bytes]] = []
    limiter = getattr(app.state, "limiter", None)
    if key.rate_per_min is not None and limiter is not None:
        remaining, reset = limiter.remaining(key.id, key.rate_per_min)
        # The limit is what the bucket holds (a minute's worth, at least 1): remaining <= it.
        extra += _limit_headers("requests", int(capacity(key.rate_per_min)), remaining, reset)
    quota = getattr(app.state, "quota", None)
    if key.token_quota_day is not None and quota is not None:
        left = max(0, key.token_quota_day - quota.used(key.id))
        now = dt.datetime.now(dt.UTC)
        midnight = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time(), dt.UTC)
        reset = (midnight - now).total_seconds()
        extra += _limit_headers("tokens", key.token_quota_day, left, reset)
    if not extra:
        return message
    return {**message, "headers": [*message.get("headers", []), *extra]}


def _limit_headers(kind: str, limit: int, remaining: int, reset_s: float) -> list[Any]:
    return [
        (f"x-ratelimit-limit-{kind}".encode(), str(limit).encode()),
        (f"x-ratelimit-remaining-{kind}".encode(), str(remaining).encode()),
        (f"x-ratelimit-reset-{kind}".encode(), _duration(reset_s).encode()),
    ]


def _duration(seconds: float) -> str:
    """OpenAI's reset format: ``6m0s``, ``1.5s``, ``20ms``."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    minutes, secs = divmod(seconds, 60)
    if minutes < 1:
        return f"{secs:.3g}s"
    hours, minutes = divmod(int(minutes), 60)
    return (f"{hours}h" if hours else "") + f"{minutes}m{int(secs)}s"
