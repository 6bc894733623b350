"""Soak: aifab's server at a steady request rate for minutes: errors, latency, memory.

One ``aifab`` server process (the churn deployment of bench/serve.py's workspace setup) gets
``--rate`` one-row requests per second (open loop: requests are sent on schedule whether or
not earlier ones have answered) for ``--duration`` after ``--warmup``. Reported: errors,
p50/p99 latency per 30 s window, and the server's RSS after the warm-up and at the end (a flat
line means no leak).

    .venv/bin/python bench/soak.py                                   # 2 minutes at 50 req/s
    .venv/bin/python bench/soak.py --rate 200 --duration 10m         # the issue's soak
    .venv/bin/python bench/soak.py --duration 30s                    # a short check
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import serve as bench_serve  # noqa: E402 - the sibling script's setup and server launcher


def rss_mb(pid: int) -> float:
    import psutil

    return float(psutil.Process(pid).memory_info().rss) / 2**20


async def soak(
    port: int, pid: int, headers: dict[str, str], body: bytes, rate: float, seconds: float
) -> dict[str, Any]:
    windows: list[dict[str, Any]] = []
    errors: dict[str, int] = {}
    latencies: list[float] = []
    rss: list[tuple[float, float]] = [(0.0, rss_mb(pid))]
    window_s = 30.0
    # Keep-alive raw-socket connections (bench/serve.py's client): httpx itself costs more CPU
    # per request than the server at 200 req/s on 2 cores.
    pool: asyncio.Queue[bench_serve.RawClient] = asyncio.Queue()
    for _ in range(64):
        pool.put_nowait(bench_serve.RawClient(port))

    async def one() -> None:
        t0 = time.perf_counter()
        client = await pool.get()
        try:
            status, _ = await client.post("/v1/predict/churn", body, headers)
            if status != 200:
                errors[str(status)] = errors.get(str(status), 0) + 1
                return
        except (OSError, asyncio.IncompleteReadError) as exc:
            errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            await client.close()
            client = bench_serve.RawClient(port)
            return
        finally:
            pool.put_nowait(client)
        latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    tasks: set[asyncio.Task[None]] = set()
    sent = 0
    next_window = window_s
    while True:
        now = time.perf_counter() - start
        if now >= seconds:
            break
        due = int(now * rate) + 1
        while sent < due:
            task = asyncio.create_task(one())
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            sent += 1
        if now >= next_window:
            windows.append(_window(latencies, next_window))
            latencies.clear()
            rss.append((now, rss_mb(pid)))
            next_window += window_s
        await asyncio.sleep(max(0.0, (sent / rate) - (time.perf_counter() - start)))
    await asyncio.gather(*tasks)
    while not pool.empty():
        await pool.get_nowait().close()
    if latencies:
        windows.append(_window(latencies, seconds))
    rss.append((seconds, rss_mb(pid)))
    return {"sent": sent, "errors": errors, "windows": windows, "rss": rss}


def _window(latencies: list[float], at: float) -> dict[str, Any]:
    xs = sorted(latencies)
    n = len(xs)
    return {
        "at_s": at,
        "requests": n,
        "p50_ms": xs[n // 2] * 1e3 if n else None,
        "p99_ms": xs[min(n - 1, int(n * 0.99))] * 1e3 if n else None,
    }


def duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``2m`` or ``1h``."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    text = text.strip().lower()
    scale = units.get(text[-1:])
    try:
        value = float(text[:-1] if scale else text) * (scale or 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected seconds, or N s/m/h") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be > 0")
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--duration",
        "--seconds",
        dest="seconds",
        type=duration,
        default=120.0,
        help="Measured time: seconds, or 2m, 10m, 1h.",
    )
    ap.add_argument(
        "--warmup",
        type=duration,
        default=20.0,
        help="Time at the same rate before measuring (lazy imports, allocator growth).",
    )
    ap.add_argument("--rate", type=float, default=50.0, help="Requests per second.")
    ap.add_argument("--log-sample", type=float, default=1.0, help="Request-log sampling.")
    ap.add_argument("--home", type=Path, help="Workspace to reuse (default: a scratch one).")
    args = ap.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="aifab-bench-soak-")) / "ws"
    secret, row = bench_serve.prepare(home)
    body = json.dumps({"records": [row]}).encode()
    headers = {"Authorization": f"Bearer {secret}"}
    proc, port = bench_serve.start("aifab", home, args.log_sample)
    try:
        # Warm up (first requests pay lazy imports and allocator growth), then measure.
        warm = asyncio.run(soak(port, proc.pid, headers, body, args.rate, args.warmup))
        print(f"warm-up: {warm['sent']} requests, {sum(warm['errors'].values())} errors")
        out = asyncio.run(soak(port, proc.pid, headers, body, args.rate, args.seconds))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(f"sent {out['sent']} requests at {args.rate:g}/s for {args.seconds:g} s")
    print(f"errors: {sum(out['errors'].values())} {out['errors'] or ''}")
    for w in out["windows"]:
        print(
            f"  window to {w['at_s']:6.1f} s: {w['requests']:5d} ok  "
            f"p50={w['p50_ms'] or float('nan'):6.2f} ms  p99={w['p99_ms'] or float('nan'):6.2f} ms"
        )
    print("server RSS (MB): " + ", ".join(f"{t:.0f}s={m:.1f}" for t, m in out["rss"]))
    first, last = out["rss"][0][1], out["rss"][-1][1]
    print(
        f"RSS after warm-up {first:.1f} MB, end {last:.1f} MB, growth {last - first:+.1f} MB "
        "(goal <= 10 MB)"
    )


if __name__ == "__main__":
    main()
