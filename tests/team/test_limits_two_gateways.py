"""Two ``aifab serve`` processes behind one "load balancer" (the test alternating between them)
share one key's rate limit and one address's failed sign-ins (issue 32, issue 31 item 10).

Each gateway has its own empty ``AIFAB_HOME`` and the team's PostgreSQL; the buckets live in that
DB, or in Redis (Debian's ``redis-server``, started here on a free port) when ``AIFAB_REDIS_URL``
is set. A key limited to 60/min holds 60 requests at once and regains one a second, so across
both gateways it gets 60 plus one per second the test took, not twice that.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serve_proc import aifab_serve, free_port  # noqa: E402

pytestmark = [pytest.mark.integration]

RATE = 60.0  # per minute: a burst of 60, then one a second


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A throwaway Debian ``redis-server`` on a free 127.0.0.1 port (skipped if not installed)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no redis-server here (apt-get install redis-server)")
    port = free_port()
    root = tempfile.mkdtemp(prefix="aifab-redis-")
    args = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", root]
    proc = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL)
    import redis

    client = redis.Redis(port=port)
    deadline = time.monotonic() + 60
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            assert proc.poll() is None, "redis-server exited"
            assert time.monotonic() < deadline, "redis-server did not answer within 60 s"
            time.sleep(0.1)
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=30)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["postgresql", "redis"])
def gateways(
    request: pytest.FixtureRequest, shared_pg: str, tmp_path: Path
) -> Iterator[tuple[str, str, str]]:
    """Two gateways on the team's DB (and Redis in the ``redis`` case): their URLs and store."""
    extra = {}
    if request.param == "redis":
        extra["AIFAB_REDIS_URL"] = request.getfixturevalue("redis_url")
    envs = []
    for name in ("gw-a", "gw-b"):
        home = tmp_path / name
        home.mkdir()
        envs.append({**os.environ, **extra, "AIFAB_DB_URL": shared_pg, "AIFAB_HOME": str(home)})
    with (
        aifab_serve(envs[0], Path(envs[0]["AIFAB_HOME"]), "--no-worker") as a,
        aifab_serve(envs[1], Path(envs[1]["AIFAB_HOME"]), "--no-worker") as b,
    ):
        yield a, b, request.param


def _rows_in_db() -> int:
    from aifab.core.db import session_scope
    from aifab.serve.tables import RateBucketRow

    with session_scope() as s:
        return int(s.scalar(select(func.count()).select_from(RateBucketRow)) or 0)


def test_a_60_per_min_key_gets_60_across_two_gateways(gateways: tuple[str, str, str]) -> None:
    from aifab.serve.keys import create_key

    a, b, store = gateways
    _, secret = create_key("viewer", name="limited", rate=f"{RATE:g}/min")
    headers = {"Authorization": f"Bearer {secret}"}
    codes: list[int] = []
    with httpx.Client(timeout=60) as client:
        started = time.monotonic()
        for i in range(150):
            r = client.get(f"{(a, b)[i % 2]}/v1/deployments", headers=headers)
            codes.append(r.status_code)
        elapsed = time.monotonic() - started
    assert set(codes) <= {200, 429}, codes
    allowed = codes.count(200)
    budget = RATE + elapsed * RATE / 60.0  # the burst, and what the bucket regained meanwhile
    print(f"{store}: {allowed} of 150 allowed in {elapsed:.2f} s (budget {budget:.1f})")
    # 60 +- 5%: per-process buckets gave each gateway its own 60 (about 120 here).
    assert abs(allowed - budget) <= 0.05 * RATE, (allowed, budget, codes)
    assert codes[:60] == [200] * 60, codes  # the burst itself is whole
    assert (_rows_in_db() > 0) == (store == "postgresql")  # Redis, when set, holds them


def test_failed_sign_ins_are_throttled_across_two_gateways(gateways: tuple[str, str, str]) -> None:
    from aifab.serve.auth_failures import FAILED_AUTH_BURST, FAILED_AUTH_PER_MIN

    a, b, _ = gateways
    codes: list[int] = []
    with httpx.Client(timeout=60) as client:
        started = time.monotonic()
        for i in range(60):
            r = client.post(f"{(a, b)[i % 2]}/ui/login", data={"key": f"wrong-{i}", "next": "/ui"})
            codes.append(r.status_code)
        elapsed = time.monotonic() - started
    assert set(codes) <= {401, 429}, codes
    failures = codes.count(401)
    budget = FAILED_AUTH_BURST + elapsed * FAILED_AUTH_PER_MIN / 60.0
    print(f"{failures} failed sign-ins of 60 let through in {elapsed:.2f} s (budget {budget:.1f})")
    # Per-process throttles let each gateway's address fail its own 20 (40 here).
    assert FAILED_AUTH_BURST <= failures <= budget + 1, (failures, budget, codes)
    assert codes[:FAILED_AUTH_BURST] == [401] * FAILED_AUTH_BURST, codes


def test_redis_buckets_are_shared_and_take_at_any_rate(redis_url: str) -> None:
    from aifab.serve.buckets import RedisBucketStore

    a, b = RedisBucketStore(redis_url), RedisBucketStore(redis_url)  # two gateways' stores
    took = [(a, b)[i % 2].take("rate:k", 60.0, 3.0) for i in range(4)]
    assert [t for t, _ in took] == [True, True, True, False]
    assert b.ahead("rate:k") > 179.0  # full again in about 3 minutes
    # A rate so high that one interval is below the clock's resolution still takes.
    assert all(a.take("rate:fast", 1e-9, 1e12)[0] for _ in range(3))
