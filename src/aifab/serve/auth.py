"""Who is calling, and may they: the ``require(*permissions)`` FastAPI dependency of every route.

It reads the key (``Authorization: Bearer`` or ``X-API-Key``), answers 401 (no, unknown or
revoked key), 403 (the role lacks the permission) or 429 (over the key's rate or token quota, or
too many failed authentications from the client's address: :mod:`aifab.serve.auth_failures`),
and leaves a :class:`Principal` on ``request.state.principal``. Secrets are never logged.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from fastapi import Depends, FastAPI, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from aifab.core.actor import acting_as
from aifab.serve.auth_failures import FailedAuthLimiter, client_bucket
from aifab.serve.errors import ApiError
from aifab.serve.keys import PERMISSIONS, KeyInfo, authenticate, hash_secret
from aifab.serve.limits import retry_after

__all__ = [
    "KeyCache",
    "Principal",
    "admit",
    "auth_failed",
    "auth_wait",
    "authorize_headers",
    "forget_keys",
    "require",
]

_ALL_PERMISSIONS = frozenset().union(*PERMISSIONS.values())
_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}
_bearer = HTTPBearer(auto_error=False, description="An aifab API key: `aifab keys create`.")
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False, description="An aifab API key.")
_P = ParamSpec("_P")
#: Set by :class:`aifab.serve.guard.RequestGuard` when it authenticated the request early.
_PRINCIPAL_SCOPE_KEY = "aifab.principal"
_R = TypeVar("_R")


@dataclass(frozen=True)
class Principal:
    """The caller of a request: its key's id, name and role (and the key's limits)."""

    key_id: str
    name: str
    role: str
    key: KeyInfo | None = None

    @property
    def actor(self) -> str:
        """The audit actor of this caller: wrap state changes in ``acting_as(p.actor)``."""
        return f"key:{self.key_id}"

    async def call(self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Run the service call ``fn(*args, **kwargs)`` on a worker thread, as this caller."""

        def run() -> _R:
            with acting_as(self.actor):
                return fn(*args, **kwargs)

        return await asyncio.to_thread(run)


class KeyCache:
    """Recent :func:`authenticate` answers by secret hash, so most requests skip the DB.

    It also remembers which secrets were valid keys lately (:meth:`known`), so a client address
    throttled for failing may still use a key it (or a neighbour behind the same address) holds.

    Args:
        ttl_s: how long an answer is reused: a revoked key keeps working at most this long.
        max_entries: the cache is emptied beyond this (random bad keys must not grow it).
        known_s: how long a valid key's hash is remembered as known (it only lets the key be
            looked up while its address is throttled; the lookup still decides).
    """

    def __init__(
        self, ttl_s: float = 1.0, max_entries: int = 10_000, known_s: float = 3600.0
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.known_s = known_s
        self._entries: dict[str, tuple[KeyInfo | None, float]] = {}
        self._known: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def known(self, secret: str) -> bool:
        """Whether ``secret`` was a valid key within ``known_s`` (no DB work)."""
        digest = hash_secret(secret)
        with self._lock:
            until = self._known.get(digest)
        return until is not None and until > time.monotonic()

    def get(self, secret: str) -> KeyInfo | None:
        """The active key of ``secret``, or None."""
        digest = hash_secret(secret)
        now = time.monotonic()
        with self._lock:
            hit = self._entries.get(digest)
        if hit is not None and hit[1] > now:
            return hit[0]
        info = authenticate(secret)
        with self._lock:
            if self.ttl_s > 0:
                if len(self._entries) >= self.max_entries:
                    self._entries.clear()
                self._entries[digest] = (info, now + self.ttl_s)
            if info is not None:
                self._known[digest] = now + self.known_s
                self._known.move_to_end(digest)
                if len(self._known) > self.max_entries:
                    self._known.popitem(last=False)
        return info

    def invalidate(self) -> None:
        """Forget every cached answer (after revoking a key in this process)."""
        with self._lock:
            self._entries.clear()


_T = TypeVar("_T")


def _on_app(app: FastAPI, name: str, make: Callable[[], _T]) -> _T:
    """``app.state.<name>``, made on first use (apps and tests may set their own first)."""
    value: _T | None = getattr(app.state, name, None)
    if value is None:
        value = make()
        setattr(app.state, name, value)
    return value


def _cache(app: FastAPI) -> KeyCache:
    return _on_app(app, "key_cache", KeyCache)


def forget_keys(app: FastAPI) -> None:
    """Make the app re-read keys now (call after revoking a key through the app)."""
    _cache(app).invalidate()


def _failures(app: FastAPI) -> FailedAuthLimiter:
    return _on_app(app, "auth_failures", FailedAuthLimiter)


def _client(request: Request) -> str:
    # The socket's peer: uvicorn runs with proxy headers off, so this cannot be spoofed.
    return client_bucket(request.client.host) if request.client is not None else "-"


def auth_wait(request: Request, secret: str) -> float | None:
    """Seconds the request's address must wait before ``secret`` is checked, or None.

    None when the address has failures left or ``secret`` was a valid key lately; costs no DB
    work either way, so a throttled flood of bogus keys is cheap to refuse.
    """
    if _cache(request.app).known(secret):  # first: a shared throttle's wait is a store read
        return None
    return _failures(request.app).wait(_client(request))


def auth_failed(request: Request) -> None:
    """Count a failed authentication against the request's client address."""
    _failures(request.app).failed(_client(request))


def _authorize(request: Request, secret: str | None, permissions: tuple[str, ...]) -> Principal:
    if not secret:
        raise ApiError(
            401,
            "missing API key: send 'Authorization: Bearer <key>' or an 'X-API-Key' header",
            code="missing_api_key",
            headers=_UNAUTHORIZED,
        )
    wait = auth_wait(request, secret)
    if wait is not None:
        after = retry_after(wait)
        raise ApiError(
            429,
            f"too many failed authentications from this address; retry in {after} s",
            code="auth_rate_limited",
            headers={"Retry-After": after},
        )
    key = _cache(request.app).get(secret)
    if key is None:
        auth_failed(request)
        raise ApiError(
            401, "invalid or revoked API key", code="invalid_api_key", headers=_UNAUTHORIZED
        )
    return admit(request, key, permissions)


def admit(request: Request, key: KeyInfo, permissions: tuple[str, ...]) -> Principal:
    """Let an authenticated ``key`` make ``request``: role, rate limit, token quota, budget.

    :func:`require` calls it after finding the key of a secret; the dashboard calls it with
    the key its session was opened with, so a request made there meets the same limits.

    Raises:
        ApiError: 403 (the role lacks every one of ``permissions``) or 429 (over a limit).
    """
    held = PERMISSIONS.get(key.role, frozenset())
    granted = next((p for p in permissions if p in held), None)
    if granted is None:
        wanted = " or ".join(repr(p) for p in permissions)
        raise ApiError(
            403,
            f"role {key.role!r} of key {key.id} lacks permission {wanted}",
            code="permission_denied",
        )
    limiter = getattr(request.app.state, "limiter", None)
    if limiter is not None:
        wait = limiter.check(key.id, key.rate_per_min)
        if wait is not None:
            raise ApiError(
                429,
                f"rate limit of key {key.id} ({key.rate_per_min:g}/min) exceeded; "
                f"retry in {retry_after(wait)} s",
                code="rate_limit_exceeded",
                headers={"Retry-After": retry_after(wait)},
            )
    quota = getattr(request.app.state, "quota", None)
    if quota is not None:
        if granted == "invoke":
            quota.check(key)
        quota.add(key.id, 0, requests=1)
    gate = getattr(request.app.state, "budget_gate", None)
    if gate is not None and granted == "invoke":
        over = gate.check(key.id)
        if over is not None:
            raise ApiError(429, f"budget exceeded: {over.message()}", code="budget_exceeded")
    principal = Principal(key.id, key.name, key.role, key)
    request.state.principal = principal
    return principal


def authorize_headers(request: Request, permissions: tuple[str, ...]) -> Principal:
    """:func:`require`'s check from the request's headers alone (the body is not read).

    The request guard calls it before reading a large body; the route's dependency then
    reuses the answer instead of checking (and counting against the rate limit) twice.
    """
    secret = request.headers.get("x-api-key")
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        secret = credentials.strip()
    return _authorize(request, secret, permissions)


def require(*permissions: str) -> Callable[..., Awaitable[Principal]]:
    """A FastAPI dependency admitting keys whose role has any of ``permissions``.

    Use ``Depends(require("invoke"))`` (or in ``dependencies=[...]``). The first of
    ``permissions`` the role has is the one granted. It uses ``request.app.state.limiter``
    (:class:`~aifab.serve.limits.RateLimiter`) and ``request.app.state.quota``
    (:class:`~aifab.serve.limits.TokenQuota`; checked when ``invoke`` is granted) when the
    app has them, and caches keys on ``app.state.key_cache``.

    Raises:
        ValueError: no permission given, or one that no role has.
    """
    if not permissions:
        raise ValueError("require() needs at least one permission")
    for permission in permissions:
        if permission not in _ALL_PERMISSIONS:
            known = ", ".join(sorted(_ALL_PERMISSIONS))
            raise ValueError(f"unknown permission {permission!r} (known: {known})")

    async def dependency(
        request: Request,
        bearer: HTTPAuthorizationCredentials | None = Depends(_bearer),
        api_key: str | None = Depends(_api_key),
    ) -> Principal:
        checked = request.scope.get(_PRINCIPAL_SCOPE_KEY)
        if checked is not None:  # the request guard checked the key before the body
            return checked
        secret = bearer.credentials if bearer is not None else api_key
        return _authorize(request, secret, permissions)

    dependency.__name__ = "require_" + "_or_".join(permissions)
    dependency.aifab_permissions = permissions  # type: ignore[attr-defined]
    return dependency
