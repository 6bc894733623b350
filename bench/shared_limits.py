"""What a shared rate limit costs per request: one process's in-memory bucket vs the shared ones.

Baseline: ``serve.limits.RateLimiter`` (one process, in memory). aifab's shared stores, each
from this one process on the same machine: the metadata DB's ``rate_buckets`` on SQLite, on
PostgreSQL (when ``pg_config`` finds a server here; started in a temp dir), and Redis (when
``redis-server`` is installed). Each takes one token per check from 20 keys in turn with a
rate high enough never to refuse, after a warm-up; the median of 5 repeats of 2,000 checks.

    .venv/bin/python bench/shared_limits.py
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "team"), str(ROOT / "tests")]

CHECKS, REPEATS, KEYS = 2_000, 5, 20


def per_check_us(limiter: Any) -> float:
    """Median microseconds per ``check`` over the repeats."""

    def run() -> float:
        t0 = time.perf_counter()
        for i in range(CHECKS):
            assert limiter.check(f"key_{i % KEYS}", 1e9) is None
        return (time.perf_counter() - t0) / CHECKS * 1e6

    run()  # warm-up: connections, statements, the keys' first rows
    return statistics.median(run() for _ in range(REPEATS))


def with_db(url: str, make: Callable[[], Any]) -> float:
    from aifab.core.db import reset_engines

    os.environ["AIFAB_DB_URL"] = url
    reset_engines()
    try:
        return per_check_us(make())
    finally:
        reset_engines()
        del os.environ["AIFAB_DB_URL"]


def redis_server() -> tuple[subprocess.Popen[bytes], str] | None:
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    from serve_proc import free_port

    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""],
        stdout=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.1)
    return proc, f"redis://127.0.0.1:{port}/0"


def main() -> None:
    from aifab.serve.buckets import DbBucketStore, RedisBucketStore
    from aifab.serve.limits import RateLimiter
    from aifab.serve.store_limits import StoreRateLimiter

    home = Path(tempfile.mkdtemp(prefix="aifab-bench-limits-"))
    os.environ["AIFAB_HOME"] = str(home)
    db_store = lambda: StoreRateLimiter(DbBucketStore())  # noqa: E731
    base = per_check_us(RateLimiter())
    rows = [("in memory, one process (baseline)", base)]
    rows.append(("metadata DB, SQLite", with_db(f"sqlite:///{home / 'aifab.db'}", db_store)))
    from pg import PostgresServer, find_bindir

    bindir, why = find_bindir()
    if bindir is not None:
        pg = PostgresServer(bindir)
        try:
            rows.append(("metadata DB, PostgreSQL", with_db(pg.new_database(), db_store)))
        finally:
            pg.stop()
    else:
        print(f"PostgreSQL left out: {why}")
    found = redis_server()
    if found is not None:
        proc, url = found
        try:
            rows.append(("Redis", per_check_us(StoreRateLimiter(RedisBucketStore(url)))))
        finally:
            proc.terminate()
            proc.wait()
    else:
        print("Redis left out: no redis-server here")
    print(f"{'store':<36} {'us/check':>9} {'x baseline':>11}")
    for name, us in rows:
        print(f"{name:<36} {us:>9.1f} {us / base:>11.1f}")
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
