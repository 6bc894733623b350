"""The worker pool's cost on the ordinary path: one image decode and one prompt render.

Each is timed in this process (the baseline: what the server did before issue 31) and
through :func:`aifab.core.workers.run` (a pebble worker with its memory limit, what the
server does now), one call after another; the medians and their ratio are printed. The
image is a 256x256 PNG decoded to a 3x32x32 model input (the multimodal example's size
class); the render is the QA prompt of ``bench/prompt_render.py``. Then the same render as
a whole request: ``POST /v1/prompts/qa/render`` to ``aifab serve`` with
``AIFAB_WORKER_PROCESSES=0`` (in the server's process: the baseline) and with the pool
(the default), P50 and P99 of each and their ratio. Goal: the request within 1.3x.

    python bench/worker_pool.py [--n 300]
"""

from __future__ import annotations

import argparse
import io
import statistics
import time
from collections.abc import Callable
from typing import Any

from aifab.core import workers
from aifab.data.image_decode import decode_pixels
from aifab.prompts.template import render

QA = "Answer from the context only.\nContext: {{ context }}\nQuestion: {{ question }}\n"
QA_VALUES = {"context": "Churn is the share of customers who leave. " * 20, "question": "What?"}


def _png(side: int = 256) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.radial_gradient("L").resize((side, side)).convert("RGB").save(buf, format="PNG")
    return buf.getvalue()


def median_ms(fn: Callable[[], Any], n: int) -> float:
    for _ in range(20):  # warm: caches, the worker's first import
        fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300, help="Calls per figure.")
    args = parser.parse_args()
    png = _png()
    cases: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
        "image decode": (decode_pixels, (png, 32, 3, 1 << 20)),
        "prompt render": (render, (QA, ["context", "question"], QA_VALUES)),
    }
    inline = {k: median_ms(lambda f=f, a=a: f(*a), args.n) for k, (f, a) in cases.items()}
    workers.start(preload=("aifab.data.image_decode", "aifab.prompts.template"))
    try:
        pooled = {
            k: median_ms(lambda f=f, a=a: workers.run(f, *a, timeout_s=10), args.n)
            for k, (f, a) in cases.items()
        }
    finally:
        workers.stop()
    print(f"{'':<14} {'in process':>11} {'worker pool':>12} {'added':>8} {'ratio':>6}")
    for k in cases:
        added = pooled[k] - inline[k]
        print(
            f"{k:<14} {inline[k]:9.2f} ms {pooled[k]:10.2f} ms {added:6.2f} ms "
            f"{pooled[k] / inline[k]:5.2f}x"
        )
    request_figures(args.n)


def render_requests(n: int, pool: bool) -> list[float]:
    """Seconds per ``POST /v1/prompts/qa/render`` to a fresh ``aifab serve``, one at a time."""
    import os
    import socket
    import subprocess
    import sys
    import tempfile

    import httpx

    home = tempfile.mkdtemp(prefix="aifab-bench-pool-")
    env = {**os.environ, "AIFAB_HOME": home, "AIFAB_WORKER_PROCESSES": "2" if pool else "0"}
    setup = (
        "from aifab.prompts import create_prompt; from aifab.serve.keys import create_key; "
        f"create_prompt('qa', {QA!r}); print(create_key('client', rate=None)[1])"
    )
    key = subprocess.run(
        [sys.executable, "-c", setup], env=env, capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    entry = "import sys; from aifab.cli.main import main; sys.argv[0] = 'aifab'; main()"
    cmd = [sys.executable, "-c", entry, "serve", "--port", str(port), "--no-worker"]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if http.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("the server did not start")
                time.sleep(0.2)
            body = {"variables": QA_VALUES}
            headers = {"Authorization": f"Bearer {key}"}
            out = []
            for i in range(n + 20):
                t0 = time.perf_counter()
                r = http.post("/v1/prompts/qa/render", json=body, headers=headers)
                if i >= 20:
                    out.append(time.perf_counter() - t0)
                if r.status_code != 200:
                    raise SystemExit(f"render answered {r.status_code}: {r.text[:200]}")
            return out
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def request_figures(n: int) -> None:
    """Print the render request's P50/P99 without and with the pool."""
    rows = {}
    for name, pool in (("in process", False), ("worker pool", True)):
        q = statistics.quantiles(render_requests(n, pool), n=100)
        p50, p99 = rows[name] = (q[49] * 1000, q[98] * 1000)
        print(f"render request, {name:<12} P50 {p50:6.2f} ms   P99 {p99:6.2f} ms")
    base, pooled = rows["in process"], rows["worker pool"]
    ratios = f"P50 {pooled[0] / base[0]:.2f}x   P99 {pooled[1] / base[1]:.2f}x"
    print(f"ratio (pool / in process): {ratios}")


if __name__ == "__main__":
    main()
