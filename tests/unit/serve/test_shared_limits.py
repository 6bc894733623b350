"""Rate-limit buckets shared through one file, as the processes of ``serve --workers`` use them."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from aifab.serve.shared_limits import SharedRateLimiter


def test_two_handles_on_one_file_share_each_bucket(tmp_path: Path) -> None:
    now = [100.0]
    a = SharedRateLimiter(tmp_path / "b.bin", clock=lambda: now[0])
    b = SharedRateLimiter(tmp_path / "b.bin", clock=lambda: now[0])
    # 10/min: a bucket of 10, refilled every 6 s; both handles draw from the same one
    allowed = [(a if i % 2 else b).check("key_1", 10.0) is None for i in range(30)]
    assert allowed.count(True) == 10 and allowed[:10] == [True] * 10
    assert b.check("key_1", 10.0) == 6.0  # seconds until the next token
    now[0] += 6.0
    assert a.check("key_1", 10.0) is None and b.check("key_1", 10.0) is not None
    assert a.check("key_2", 60.0) is None  # another key has its own bucket
    assert a.check("key_3", None) is None  # no limit
    a.close()
    b.close()


def _burst(path: Path, n: int, out: multiprocessing.Queue) -> None:
    limiter = SharedRateLimiter(path)
    out.put(sum(limiter.check("key_1", 1.0) is None for _ in range(n)))


def test_processes_together_pass_exactly_the_bucket(tmp_path: Path) -> None:
    # 1/min: a bucket of 1 token, refilled every 60 s; 4 processes x 50 tries take 1
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue = ctx.Queue()
    procs = [ctx.Process(target=_burst, args=(tmp_path / "b.bin", 50, out)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert sum(out.get(timeout=5) for _ in procs) == 1


def test_a_full_table_reuses_the_idlest_slot(tmp_path: Path) -> None:
    now = [0.0]
    limiter = SharedRateLimiter(tmp_path / "b.bin", clock=lambda: now[0], slots=64)
    for i in range(64):
        now[0] += 0.001
        assert limiter.check(f"k{i}", 1.0) is None
    assert limiter.check("one-more", 1.0) is None  # takes k0's slot (idle longest)
    assert limiter.check("k63", 1.0) is not None  # recent keys keep their bucket
    limiter.close()


def test_remaining_reads_the_shared_bucket_like_the_local_limiter(tmp_path: Path) -> None:
    """The x-ratelimit headers of `serve --workers` need it (it was missing: a 500 per call)."""
    from aifab.serve.limits import RateLimiter

    now = [100.0]
    shared = SharedRateLimiter(tmp_path / "b.bin", clock=lambda: now[0])
    local = RateLimiter(clock=lambda: now[0])
    assert shared.remaining("key_1", 60.0) == local.remaining("key_1", 60.0) == (60, 0.0)
    for _ in range(3):
        shared.check("key_1", 60.0)
        local.check("key_1", 60.0)
    assert shared.remaining("key_1", 60.0) == local.remaining("key_1", 60.0) == (57, 3.0)
    shared.close()
