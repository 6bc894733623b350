"""Shared token buckets on the metadata DB (SQLite here; PostgreSQL and Redis in tests/team)."""

from __future__ import annotations

import pytest

from aifab.serve.buckets import DbBucketStore
from aifab.serve.store_limits import StoreFailedAuth, StoreRateLimiter


def test_two_stores_on_one_db_share_a_bucket_and_refuse_past_its_burst() -> None:
    a, b = DbBucketStore(), DbBucketStore()  # as two gateway processes would hold
    took = [(a, b)[i % 2].take("rate:k", 60.0, 3.0) for i in range(4)]  # 3 at once, 1 a minute
    assert [t for t, _ in took] == [True, True, True, False]
    assert took[2][1] == pytest.approx(180.0, abs=1.0)  # full again in 3 minutes
    assert b.ahead("rate:k") == pytest.approx(180.0, abs=1.0)
    assert a.ahead("rate:other") == 0.0
    assert a.take("rate:other", 60.0, 1.0)[0]  # buckets are per key


def test_limiters_over_the_db_store_keep_the_gateway_contract() -> None:
    limiter, other = StoreRateLimiter(DbBucketStore()), StoreRateLimiter(DbBucketStore())
    assert limiter.check("key_a", None) is None  # no limit
    assert limiter.check("key_a", 2.0) is None
    assert limiter.remaining("key_a", 2.0) == (1, pytest.approx(30.0, abs=1.0))
    assert other.check("key_a", 2.0) is None
    wait = limiter.check("key_a", 2.0)
    assert wait == pytest.approx(30.0, abs=1.0)  # the burst of 2 went through two limiters
    failures = StoreFailedAuth(DbBucketStore(), burst=2, per_minute=1)
    assert failures.wait("10.0.0.1") is None
    failures.failed("10.0.0.1")
    assert failures.wait("10.0.0.1") is None
    StoreFailedAuth(DbBucketStore(), burst=2, per_minute=1).failed("10.0.0.1")
    assert failures.wait("10.0.0.1") == pytest.approx(60.0, abs=1.0)
