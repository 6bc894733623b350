"""Per-key limits of the gateway: a token-bucket rate limiter and daily token quotas.

The bucket of a key holds one minute's worth of its rate (at least one request) and refills
continuously, so ``N/min`` reads as users read it: a key at 3/min may make 3 requests at once,
then one every 20 s; a key at 600/min bursts 600, then gets 10 a second (``10/s`` is the same
rate: 600/min). ``x-ratelimit-limit-requests`` is that capacity, ``-remaining-`` the whole
requests in the bucket, ``-reset-`` the time until it is full again. Token use is
counted in memory and flushed to ``key_usage`` (per key and UTC day) by a background thread; a
request of a key with a quota first reserves its most tokens there with one atomic conditional
UPDATE (exact across server processes), and is charged what it really used when it ends.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import CursorResult, select, update
from sqlalchemy.exc import IntegrityError

from aifab.core.db import session_scope
from aifab.serve.errors import ApiError
from aifab.serve.keys import KeyInfo
from aifab.serve.tables import ApiKeyRow, KeyUsageRow

__all__ = [
    "BURST_SECONDS",
    "RateLimiter",
    "capacity",
    "Reservation",
    "TokenQuota",
    "retry_after",
    "utc_day",
]

log = logging.getLogger("aifab.serve.limits")

#: A bucket holds this many seconds' worth of a key's rate: ``N/min`` allows a burst of N.
BURST_SECONDS = 60.0


def capacity(rate_per_min: float) -> float:
    """Requests a key's bucket holds when full: a minute's worth, at least one."""
    return max(1.0, rate_per_min / 60.0 * BURST_SECONDS)


def retry_after(seconds: float) -> str:
    """A ``Retry-After`` header value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))


def utc_day(ts: float) -> str:
    """The UTC date of a timestamp, ``YYYY-MM-DD`` (the period of token quotas)."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d")


def _seconds_to_midnight(ts: float) -> float:
    now = dt.datetime.fromtimestamp(ts, dt.UTC)
    midnight = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time(), dt.UTC)
    return (midnight - now).total_seconds()


class RateLimiter:
    """Token buckets per key, refilled continuously at the key's rate.

    Args:
        clock: monotonic seconds (injectable, so tests need not sleep).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, last refill)
        self._lock = threading.Lock()

    def check(self, key_id: str, rate_per_min: float | None) -> float | None:
        """Take one token from the key's bucket.

        Returns:
            None when allowed (a token was taken; no limit also allows), else the seconds until
            a token will be there.
        """
        if rate_per_min is None:
            return None
        per_s = rate_per_min / 60.0
        full = capacity(rate_per_min)
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(key_id, (full, now))
            tokens = min(full, tokens + (now - last) * per_s)
            if tokens >= 1.0:
                self._buckets[key_id] = (tokens - 1.0, now)
                return None
            self._buckets[key_id] = (tokens, now)
        return (1.0 - tokens) / per_s

    def remaining(self, key_id: str, rate_per_min: float) -> tuple[int, float]:
        """Read-only: whole requests left in the key's bucket now, and seconds until it is full."""
        per_s = rate_per_min / 60.0
        full = capacity(rate_per_min)
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(key_id, (full, now))
        tokens = min(full, tokens + (now - last) * per_s)
        return int(tokens), (full - tokens) / per_s


@dataclass(frozen=True)
class Reservation:
    """Tokens held against a key's quota for one request until it is settled."""

    key_id: str
    day: str
    tokens: int


class TokenQuota:
    """Tokens used per key and UTC day, enforced against each key's daily quota.

    Usage is kept in memory (loaded from ``key_usage`` the first time a key is seen on a day)
    and written back by a background thread every ``flush_interval_s`` and on :meth:`close`.

    Args:
        flush_interval_s: how often pending usage is written.
        clock: wall-clock seconds (injectable for tests that cross midnight).
    """

    def __init__(
        self, flush_interval_s: float = 1.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.flush_interval_s = flush_interval_s
        self._clock = clock
        self._used: dict[tuple[str, str], int] = {}  # (key, day) -> tokens (DB + pending)
        self._pending: dict[tuple[str, str], list[float]] = {}  # -> [tokens, requests, last]
        self._rows: set[tuple[str, str]] = set()  # key_usage rows known to exist
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def used(self, key_id: str) -> int:
        """Tokens the key used today (UTC)."""
        return self._load(key_id, utc_day(self._clock()))

    def check(self, key: KeyInfo) -> None:
        """Refuse a key that has used up today's tokens.

        Raises:
            ApiError: 429 with ``Retry-After`` = seconds until UTC midnight.
        """
        if key.token_quota_day is None:
            return
        now = self._clock()
        used = self._load(key.id, utc_day(now))
        if used >= key.token_quota_day:
            wait = _seconds_to_midnight(now)
            raise ApiError(
                429,
                f"token quota of key {key.id} used up: {used} of {key.token_quota_day} "
                "tokens today (UTC); it resets at midnight UTC",
                code="token_quota_exceeded",
                headers={"Retry-After": retry_after(wait)},
            )

    def reserve(self, key: KeyInfo, tokens: int) -> Reservation | None:
        """Hold ``tokens`` (a request's most) against the key's quota, or refuse the request.

        The hold is one conditional UPDATE of ``key_usage``, so concurrent requests in every
        server process together never pass the quota. Settle it with :meth:`settle`.

        Returns:
            The reservation, or None for a key without a quota.

        Raises:
            ApiError: 429 naming the quota, with ``Retry-After`` = seconds until UTC midnight.
        """
        if key.token_quota_day is None:
            return None
        now = self._clock()
        day = utc_day(now)
        tokens = max(0, int(tokens))
        with self._lock:  # unflushed usage of this process counts too
            local = int(self._pending.get((key.id, day), [0, 0, 0])[0])
        slot = (key.id, day)
        with session_scope() as s:
            if slot not in self._rows:
                if s.get(KeyUsageRow, slot) is None:
                    try:
                        with s.begin_nested():
                            s.add(KeyUsageRow(key_id=key.id, day=day, tokens=0, requests=0))
                    except IntegrityError:
                        pass  # another process made the row meanwhile
                self._rows.add(slot)  # rows are never deleted: one check per key and day
            held = s.execute(
                update(KeyUsageRow)
                .where(
                    KeyUsageRow.key_id == key.id,
                    KeyUsageRow.day == day,
                    KeyUsageRow.tokens + (local + tokens) <= key.token_quota_day,
                )
                .values(tokens=KeyUsageRow.tokens + tokens)
                .returning(KeyUsageRow.tokens)
                .execution_options(synchronize_session=False)  # no ORM objects to refresh
            ).first()
            ok = held is not None
            if held is not None:
                stored = int(held[0])
            else:
                stored = int(
                    s.scalar(
                        select(KeyUsageRow.tokens).where(
                            KeyUsageRow.key_id == key.id, KeyUsageRow.day == day
                        )
                    )
                    or 0
                )
        with self._lock:
            self._used[(key.id, day)] = max(self._used.get((key.id, day), 0), stored + local)
        if not ok:
            raise ApiError(
                429,
                f"token quota of key {key.id} exceeded: this request may use up to {tokens} "
                f"tokens, {max(0, key.token_quota_day - stored - local)} of the "
                f"{key.token_quota_day} tokens a day (UTC) are left; it resets at midnight UTC",
                code="token_quota_exceeded",
                headers={"Retry-After": retry_after(_seconds_to_midnight(now))},
            )
        return Reservation(key.id, day, tokens)

    def settle(self, reservation: Reservation, tokens: int) -> None:
        """Charge what the request used instead of what it reserved (written in the background)."""
        delta = int(tokens) - reservation.tokens
        slot = (reservation.key_id, reservation.day)
        now = self._clock()
        with self._lock:
            self._used[slot] = self._used.get(slot, reservation.tokens) + delta
            pending = self._pending.setdefault(slot, [0, 0, now])
            pending[0] += delta
            pending[2] = now
            self._start()

    def _start(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(
                target=self._loop, name="aifab-token-quota", daemon=True
            )
            self._thread.start()

    def add(self, key_id: str, tokens: int, requests: int = 0) -> None:
        """Count ``tokens`` (and ``requests``) against the key's day; written in the background."""
        now = self._clock()
        slot = (key_id, utc_day(now))
        self._load(*slot)
        with self._lock:
            self._used[slot] = self._used.get(slot, 0) + int(tokens)
            pending = self._pending.setdefault(slot, [0, 0, now])
            pending[0] += int(tokens)
            pending[1] += int(requests)
            pending[2] = now
            self._start()

    def _load(self, key_id: str, day: str) -> int:
        with self._lock:
            known = self._used.get((key_id, day))
        if known is not None:
            return known
        with session_scope() as s:
            row = s.get(KeyUsageRow, (key_id, day))
            stored = row.tokens if row is not None else 0
        with self._lock:
            # Another thread may have loaded it meanwhile; keep the first (it may hold adds).
            return self._used.setdefault((key_id, day), stored)

    def flush(self) -> None:
        """Write pending usage to ``key_usage`` now (and refresh totals other servers wrote)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return
        totals: dict[tuple[str, str], int] = {}
        try:
            with session_scope() as s:
                for (key_id, day), (tokens, requests, last) in pending.items():
                    # In SQL, not read-modify-write: other server processes update it too.
                    done: CursorResult[Any] = s.execute(  # type: ignore[assignment]
                        update(KeyUsageRow)
                        .where(KeyUsageRow.key_id == key_id, KeyUsageRow.day == day)
                        .values(
                            tokens=KeyUsageRow.tokens + int(tokens),
                            requests=KeyUsageRow.requests + int(requests),
                        )
                    )
                    if not done.rowcount:
                        s.add(
                            KeyUsageRow(
                                key_id=key_id, day=day, tokens=int(tokens), requests=int(requests)
                            )
                        )
                        s.flush()
                    row = s.get(KeyUsageRow, (key_id, day), populate_existing=True)
                    totals[(key_id, day)] = row.tokens if row is not None else int(tokens)
                    key = s.get(ApiKeyRow, key_id)
                    if key is not None:
                        key.last_used_at = last
        except Exception:  # noqa: BLE001 - put it back: counting must survive a DB hiccup
            log.exception("could not write key usage; will retry")
            with self._lock:
                for slot, (tokens, requests, last) in pending.items():
                    mine = self._pending.setdefault(slot, [0, 0, last])
                    mine[0] += tokens
                    mine[1] += requests
            return
        today = utc_day(self._clock())
        with self._lock:
            for slot, total in totals.items():
                extra = self._pending.get(slot, [0, 0, 0])[0]
                self._used[slot] = max(self._used.get(slot, 0), int(total + extra))
            for slot in [s for s in self._used if s[1] < today and s not in self._pending]:
                del self._used[slot]  # past days no longer count

    def close(self) -> None:
        """Write what is pending and stop the background thread."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout=30.0)
        self.flush()

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.flush_interval_s)
            self.flush()
            with self._lock:
                if self._closed:
                    self._thread = None
                    return

    def snapshot(self) -> dict[str, Any]:
        """Tokens per key today as held in memory (for status pages and tests)."""
        day = utc_day(self._clock())
        with self._lock:
            return {k: v for (k, d), v in self._used.items() if d == day}
