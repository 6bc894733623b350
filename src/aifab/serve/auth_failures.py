"""Failed authentication, limited per client address: a flood of bogus keys is a cheap 429.

Each address may fail ``burst`` times, then once per ``60 / per_minute`` seconds. While an
address is over, a secret that is not a recently valid key is answered 429 before any DB work;
a key that was valid recently still gets through (callers behind one address, or one NAT,
keep working while a neighbour floods). The API (:mod:`aifab.serve.auth`) and the dashboard's
sign-in share one limiter per server process, or one store for every gateway
(:mod:`aifab.serve.store_limits`). An IPv6 client counts by its /64 network, the block one
subscriber gets, so cycling addresses within it buys no fresh budget.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["FAILED_AUTH_BURST", "FAILED_AUTH_PER_MIN", "FailedAuthLimiter", "client_bucket"]

#: Failures an address may make at once before it is slowed down.
FAILED_AUTH_BURST = 20
#: Failures per minute an address regains after its burst is spent.
FAILED_AUTH_PER_MIN = 30.0


def client_bucket(host: str) -> str:
    """Whose failures a client address counts as: itself (IPv4), its /64 network (IPv6).

    An IPv4 address mapped into IPv6 (``::ffff:a.b.c.d``) counts as the IPv4 address; a host
    that is not an address (a test client's name, ``-``) counts as itself.
    """
    try:
        addr = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        return str(ipaddress.IPv6Network((addr, 64), strict=False))
    return str(addr)


class FailedAuthLimiter:
    """A token bucket of failed authentications per client address (in memory, bounded).

    Args:
        burst: failures an address may make before it waits.
        per_minute: rate at which an address regains failures.
        max_clients: addresses remembered; the least recently failing are forgotten beyond it.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        burst: int = FAILED_AUTH_BURST,
        per_minute: float = FAILED_AUTH_PER_MIN,
        max_clients: int = 50_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if burst < 1 or per_minute <= 0 or max_clients < 1:
            raise ValueError("burst and max_clients must be >= 1, per_minute > 0")
        self.burst = float(burst)
        self.per_s = per_minute / 60.0
        self.max_clients = max_clients
        self._clock = clock
        # address -> (tokens left, when counted); most recent failure last.
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def _tokens(self, client: str, now: float) -> float:
        entry = self._buckets.get(client)
        if entry is None:
            return self.burst
        tokens, at = entry
        return min(self.burst, tokens + (now - at) * self.per_s)

    def wait(self, client: str) -> float | None:
        """Seconds until ``client`` may fail again, or None when it may now."""
        now = self._clock()
        with self._lock:
            tokens = self._tokens(client, now)
        return None if tokens >= 1.0 else (1.0 - tokens) / self.per_s

    def failed(self, client: str) -> None:
        """Count one failed authentication of ``client``."""
        now = self._clock()
        with self._lock:
            tokens = max(0.0, self._tokens(client, now) - 1.0)
            self._buckets[client] = (tokens, now)
            self._buckets.move_to_end(client)
            while len(self._buckets) > self.max_clients:
                self._buckets.popitem(last=False)
