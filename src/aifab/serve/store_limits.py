"""Rate limits and the failed-authentication throttle kept in a store all gateways share.

With N gateways behind a load balancer, per-process buckets give a key N times its rate and an
address N times its failed sign-ins. Here the buckets live in a
:class:`~aifab.serve.buckets.BucketStore` (Redis when ``AIFAB_REDIS_URL`` is set, else the
metadata DB when it is a team's PostgreSQL), at one store call per admitted request. A refusal
is remembered in the process until its wait is over (no bucket regains a token sooner,
whoever takes from it), so a flood of refused requests costs no store work.
:func:`gateway_limiters` picks the limiters a server process uses.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from aifab.core.settings import get_settings
from aifab.serve.auth_failures import FAILED_AUTH_BURST, FAILED_AUTH_PER_MIN, FailedAuthLimiter
from aifab.serve.buckets import BucketStore, DbBucketStore, RedisBucketStore
from aifab.serve.limits import RateLimiter, capacity

__all__ = ["StoreFailedAuth", "StoreRateLimiter", "gateway_limiters"]


class _Refusals:
    """Until when each name is known to be refused (monotonic seconds), bounded."""

    def __init__(self, max_names: int = 50_000) -> None:
        self.max_names = max_names
        self._until: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def wait(self, name: str) -> float | None:
        now = time.monotonic()
        with self._lock:
            until = self._until.get(name)
            if until is None:
                return None
            if until <= now:
                del self._until[name]
                return None
        return until - now

    def refuse(self, name: str, wait_s: float) -> None:
        with self._lock:
            self._until[name] = time.monotonic() + wait_s
            self._until.move_to_end(name)
            while len(self._until) > self.max_names:
                self._until.popitem(last=False)


class StoreRateLimiter:
    """Per-key token buckets in a shared store.

    The contract of :class:`~aifab.serve.limits.RateLimiter`.
    """

    def __init__(self, store: BucketStore) -> None:
        self.store = store
        self._refused = _Refusals()
        self._seen: dict[str, tuple[float, float]] = {}  # key -> (seconds to full, when seen)
        self._lock = threading.Lock()

    def check(self, key_id: str, rate_per_min: float | None) -> float | None:
        """Take one token from the key's shared bucket.

        Returns:
            None when allowed (no limit also allows), else the seconds until a token is there.
        """
        if rate_per_min is None:
            return None
        wait = self._refused.wait(key_id)
        if wait is not None:
            return wait
        interval = 60.0 / rate_per_min
        burst = capacity(rate_per_min)
        taken, ahead = self.store.take(f"rate:{key_id}", interval, burst)
        with self._lock:
            self._seen[key_id] = (ahead, time.monotonic())
        if taken:
            return None
        wait = max(ahead - (burst - 1.0) * interval, 1e-3)
        self._refused.refuse(key_id, wait)
        return wait

    def remaining(self, key_id: str, rate_per_min: float) -> tuple[int, float]:
        """Whole requests left and seconds until full, as of this process's last check.

        Read from what the last :meth:`check` of the key saw (the headers cost no store call);
        other gateways' takes since then are not in it.
        """
        interval = 60.0 / rate_per_min
        with self._lock:
            ahead, at = self._seen.get(key_id, (0.0, time.monotonic()))
        ahead = max(0.0, ahead - (time.monotonic() - at))
        tokens = capacity(rate_per_min) - ahead / interval
        return max(0, math.floor(tokens + 1e-9)), ahead


class StoreFailedAuth:
    """Failed authentications per client address, in a shared store.

    The contract of :class:`~aifab.serve.auth_failures.FailedAuthLimiter`.
    """

    def __init__(
        self,
        store: BucketStore,
        burst: int = FAILED_AUTH_BURST,
        per_minute: float = FAILED_AUTH_PER_MIN,
    ) -> None:
        if burst < 1 or per_minute <= 0:
            raise ValueError("burst must be >= 1, per_minute > 0")
        self.store = store
        self.burst = float(burst)
        self.interval = 60.0 / per_minute
        self._refused = _Refusals()

    def _over(self, client: str, ahead: float) -> float | None:
        wait = ahead - (self.burst - 1.0) * self.interval
        if wait <= 1e-9:
            return None
        self._refused.refuse(client, wait)
        return wait

    def wait(self, client: str) -> float | None:
        """Seconds until ``client`` may fail again, or None when it may now."""
        wait = self._refused.wait(client)
        if wait is not None:
            return wait
        return self._over(client, self.store.ahead(f"auth:{client}"))

    def failed(self, client: str) -> None:
        """Count one failed authentication of ``client`` (an empty bucket stays empty)."""
        _, ahead = self.store.take(f"auth:{client}", self.interval, self.burst)
        self._over(client, ahead)


def gateway_limiters(shared_dir: Path | None = None) -> tuple[Any, Any]:
    """The rate limiter and failed-authentication throttle of one server process.

    Redis when ``AIFAB_REDIS_URL`` is set; else the metadata DB when it is shared by machines
    (PostgreSQL); else, for the processes of one ``aifab serve --workers N``, rate buckets in
    their run directory's file and the throttle in the (SQLite) metadata DB; else both in
    memory, as one process needs.

    Args:
        shared_dir: the run directory of ``aifab serve --workers N``; None for one process.

    Returns:
        ``(limiter, auth_failures)`` for ``app.state``.
    """
    settings = get_settings()
    store: BucketStore | None = None
    if settings.redis_url:
        store = RedisBucketStore(settings.redis_url)
    elif settings.team_db:
        store = DbBucketStore()
    if store is not None:
        return StoreRateLimiter(store), StoreFailedAuth(store)
    if shared_dir is not None:
        from aifab.serve.shared_limits import SharedRateLimiter

        return SharedRateLimiter(shared_dir / "ratelimit.bin"), StoreFailedAuth(DbBucketStore())
    return RateLimiter(), FailedAuthLimiter()
