"""Rate limits (token buckets on an injected clock) and daily token quotas kept in key_usage."""

from __future__ import annotations

import datetime as dt

import pytest

from aifab.core.db import session_scope
from aifab.serve.errors import ApiError
from aifab.serve.keys import KeyInfo, create_key, get_key
from aifab.serve.limits import (
    BURST_SECONDS,
    RateLimiter,
    TokenQuota,
    capacity,
    retry_after,
    utc_day,
)
from aifab.serve.tables import KeyUsageRow


class Clock:
    """A hand-moved clock: tests advance it instead of sleeping."""

    def __init__(self, t: float = 1_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_bucket_bursts_a_minutes_worth_then_refills() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    burst = int(60 / 60 * BURST_SECONDS)  # 60/min: 60 requests at once
    assert burst == 60
    assert [limiter.check("k", 60) for _ in range(burst)] == [None] * burst
    wait = limiter.check("k", 60)
    assert wait == pytest.approx(1.0)  # one token a second
    clock.t += 0.5
    assert limiter.check("k", 60) == pytest.approx(0.5)
    clock.t += 0.5
    assert limiter.check("k", 60) is None
    assert limiter.check("other", 60) is None  # buckets are per key
    clock.t += 3600
    assert [limiter.check("k", 60) for _ in range(burst)] == [None] * burst  # capped refill
    assert limiter.check("k", 60) is not None


def test_n_per_min_allows_a_burst_of_n() -> None:
    """Issue 23 item 5: a 3/min key allowed one request, then 429 (a 10-second bucket)."""
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    assert [limiter.check("k", 3) for _ in range(3)] == [None] * 3
    assert limiter.check("k", 3) == pytest.approx(20.0)  # then one every 20 s
    assert capacity(3) == 3 and capacity(0.5) == 1  # a slower rate still allows one
    assert limiter.remaining("k", 3) == (0, pytest.approx(60.0))
    clock.t += 20
    assert limiter.remaining("k", 3) == (1, pytest.approx(40.0))


def test_slow_rates_get_one_request_and_unlimited_keys_pass() -> None:
    clock = Clock()
    limiter = RateLimiter(clock=clock)
    assert limiter.check("k", 1) is None  # 1/min still allows one request
    assert limiter.check("k", 1) == pytest.approx(60.0)
    assert all(limiter.check("free", None) is None for _ in range(1000))


def test_retry_after_is_whole_seconds_at_least_one() -> None:
    assert retry_after(0.01) == "1"
    assert retry_after(1.2) == "2"
    assert retry_after(60.0) == "60"


def _key(quota: int | None) -> KeyInfo:
    record, _ = create_key("client", token_quota=quota)
    return KeyInfo(record["id"], "", "client", 600.0, quota)


def test_quota_refuses_when_used_up_with_retry_after_midnight() -> None:
    noon = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC).timestamp()
    clock = Clock(noon)
    quota = TokenQuota(clock=clock)
    key = _key(100)
    quota.check(key)
    quota.add(key.id, 60, requests=1)
    quota.check(key)
    quota.add(key.id, 40, requests=1)
    with pytest.raises(ApiError) as err:
        quota.check(key)
    assert err.value.status == 429
    assert err.value.headers["Retry-After"] == str(12 * 3600)
    assert "100 of 100" in err.value.message
    clock.t += 12 * 3600  # a new UTC day
    quota.check(key)
    assert quota.used(key.id) == 0
    quota.close()


def test_usage_is_persisted_per_day_and_loaded_on_first_sight() -> None:
    clock = Clock(dt.datetime(2026, 3, 1, 8, 0, tzinfo=dt.UTC).timestamp())
    key = _key(1000)
    first = TokenQuota(clock=clock)
    first.add(key.id, 700, requests=2)
    first.close()  # flushes
    with session_scope() as s:
        row = s.get(KeyUsageRow, (key.id, "2026-03-01"))
        assert row is not None and (row.tokens, row.requests) == (700, 2)
    assert get_key(key.id)["last_used_at"] == clock.t

    second = TokenQuota(clock=clock)  # a restarted server
    assert second.used(key.id) == 700
    second.add(key.id, 300)
    with pytest.raises(ApiError):
        second.check(key)
    second.flush()
    with session_scope() as s:
        row = s.get(KeyUsageRow, (key.id, "2026-03-01"))
        assert row is not None and row.tokens == 1000
    second.close()


def test_unlimited_keys_are_never_refused() -> None:
    quota = TokenQuota()
    key = _key(None)
    quota.add(key.id, 10**9)
    quota.check(key)
    quota.close()


def test_utc_day() -> None:
    assert utc_day(dt.datetime(2026, 1, 2, 23, 59, tzinfo=dt.UTC).timestamp()) == "2026-01-02"
