"""Token buckets every gateway shares: rows of the metadata DB, or keys of a Redis server.

A bucket is one number, its "theoretical arrival time" (GCRA, the cell-rate algorithm):
the moment it is full again. Taking a token moves it ``interval`` later, allowed while it
stays within ``burst * interval`` of now, so a bucket behaves as one that holds ``burst``
tokens and regains one every ``interval`` seconds. One number makes each take one atomic
statement (an UPSERT on the DB, a script on Redis) that is exact however many gateway
processes take at once, and the store's own clock is the clock, so gateways on machines whose
clocks disagree still share one budget.

Neither ``limits`` nor ``pyrate-limiter`` fits here: both count requests in windows (fixed,
moving, sliding log) rather than keep a token bucket, which is what keys promise
(:mod:`aifab.serve.limits`).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from sqlalchemy import Float, bindparam, case, cast, create_engine, delete, extract, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.elements import ColumnElement

from aifab.core.db import get_engine
from aifab.serve.tables import RateBucketRow

__all__ = ["BucketStore", "DbBucketStore", "RedisBucketStore"]

#: Float slack when comparing a bucket's fill with its burst (sums of intervals round).
_EPS = 1e-6
#: How often one process deletes the DB's rows of buckets that are full again.
PRUNE_EVERY_S = 600.0


class BucketStore(Protocol):
    """Where shared buckets live (the metadata DB or Redis)."""

    def take(self, key: str, interval_s: float, burst: float) -> tuple[bool, float]:
        """Take one token from bucket ``key`` if it has one.

        Returns:
            Whether a token was taken, and the seconds until the bucket is full (after taking).
        """
        ...

    def ahead(self, key: str) -> float:
        """Seconds until bucket ``key`` is full (0 for a full or unknown bucket)."""
        ...


def _db_now(dialect: str) -> ColumnElement[float]:
    """The DB server's clock in epoch seconds, constant within one statement."""
    if dialect == "postgresql":
        return cast(extract("epoch", func.statement_timestamp()), Float)
    return (func.julianday("now") - 2440587.5) * 86400.0  # SQLite: 'now' is fixed per step


class DbBucketStore:
    """Buckets as rows of ``rate_buckets`` in the metadata DB (SQLite or PostgreSQL).

    Each take is one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE ... RETURNING``: the row is
    locked by the statement itself, so it needs no other lock to be exact.
    """

    def __init__(self) -> None:
        engine = get_engine()  # migrated: the table is there
        self._dialect = engine.dialect.name
        if self._dialect == "postgresql":
            # Its own pool in autocommit, without aifab's BEGIN hook or pre-ping: a take is one
            # round trip (the shared engine spent five: ping, BEGIN, its hook, the statement,
            # COMMIT). A connection the server dropped fails one take and leaves the pool.
            engine = create_engine(engine.url, isolation_level="AUTOCOMMIT")
        self._engine = engine
        self._next_prune = time.monotonic() + PRUNE_EVERY_S
        self._lock = threading.Lock()
        # Built once: the statements are the same for every take, only the values change.
        t = RateBucketRow.__table__
        now = _db_now(self._dialect)
        interval, limit = bindparam("interval", type_=Float), bindparam("limit", type_=Float)
        start = case((t.c.tat > now, t.c.tat), else_=now)
        insert: Any = (postgresql if self._dialect == "postgresql" else sqlite).insert(t)
        self._take = (
            insert.values(key=bindparam("key"), tat=now + interval)
            .on_conflict_do_update(
                index_elements=[t.c.key],
                set_={"tat": start + interval},
                where=start + interval - now <= limit,
            )
            .returning(t.c.tat - now)
        )
        self._ahead = select(t.c.tat - now).where(t.c.key == bindparam("key"))

    def take(self, key: str, interval_s: float, burst: float) -> tuple[bool, float]:
        """Take one token from ``key``'s bucket if it has one (one statement)."""
        values = {"key": key, "interval": interval_s, "limit": burst * interval_s + _EPS}
        with self._engine.begin() as conn:
            row = conn.execute(self._take, values).first()
            if row is None:  # no token: the WHERE kept the row as it was
                ahead = conn.execute(self._ahead, {"key": key}).scalar()
        self._prune()
        if row is not None:
            return True, max(0.0, float(row[0]))
        return False, max(0.0, float(ahead or 0.0))

    def ahead(self, key: str) -> float:
        """Seconds until ``key``'s bucket is full (one read)."""
        with self._engine.connect() as conn:
            value = conn.execute(self._ahead, {"key": key}).scalar()
        return max(0.0, float(value or 0.0))

    def _prune(self) -> None:
        """Now and then, delete rows of full buckets (a flood of addresses must not pile up)."""
        with self._lock:
            if time.monotonic() < self._next_prune:
                return
            self._next_prune = time.monotonic() + PRUNE_EVERY_S
        with self._engine.begin() as conn:
            conn.execute(delete(RateBucketRow).where(RateBucketRow.tat < _db_now(self._dialect)))


#: GCRA in one server-side step: KEYS[1] the bucket; ARGV interval, burst * interval.
#: Floats go back as strings (Redis turns Lua numbers into integers).
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local new = tat + tonumber(ARGV[1])
if new - now <= tonumber(ARGV[2]) + 0.000001 then
  local ttl = math.max(1, math.ceil((new - now) * 1000))  -- a tiny interval rounds to 0 ms
  redis.call('SET', KEYS[1], string.format('%.6f', new), 'PX', ttl)
  return {1, string.format('%.6f', new - now)}
end
return {0, string.format('%.6f', tat - now)}
"""
_AHEAD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
return string.format('%.6f', math.max(0, tat - now))
"""


class RedisBucketStore:
    """Buckets as Redis keys (``aifab:<key>``) that expire once full again.

    Args:
        url: the server, e.g. ``redis://redis-host:6379/0`` (``AIFAB_REDIS_URL``).
    """

    def __init__(self, url: str) -> None:
        from aifab.core.extras import require

        redis = require("redis", "a rate-limit store on Redis (AIFAB_REDIS_URL)")
        self._client = redis.Redis.from_url(url, socket_timeout=5.0)
        self._take = self._client.register_script(_TAKE)
        self._ahead = self._client.register_script(_AHEAD)

    def take(self, key: str, interval_s: float, burst: float) -> tuple[bool, float]:
        """Take one token from ``key``'s bucket if it has one (one script call)."""
        taken, ahead = self._take(keys=[f"aifab:{key}"], args=[interval_s, burst * interval_s])
        return bool(int(taken)), float(ahead)

    def ahead(self, key: str) -> float:
        """Seconds until ``key``'s bucket is full (one script call)."""
        return float(self._ahead(keys=[f"aifab:{key}"]))
