"""Serving overhead: aifab's server vs a bare FastAPI endpoint and the floor.

Servers, each its own uvicorn process (so the load generator does not share their GIL), on
one scratch workspace holding the quickstart churn model:

* ``floor``: the smallest FastAPI app doing the same work: ``json.loads``, the fitted feature
  transform's NumPy evaluator, the same MLP weights as NumPy matrices, softmax, JSON;
* ``bare``: one FastAPI route: ``json.loads`` -> ``ClassifierHandler.decode`` -> ``predict``
  on one dedicated worker thread -> ``encode`` -> JSON (what aifab does, minus the gateway);
* ``aifab``: ``aifab serve``'s app, deployment ``churn`` (no batching), with key auth, rate
  limiting, metrics and the request log;
* ``aifab-batch``: the same server's deployment ``churn-batch`` (max batch 32, wait 2 ms);
* ``aifab-w2``: ``aifab serve --workers 2``, deployment ``churn`` (no batching).

Clients (``httpx.AsyncClient``, or a raw-socket client with ``--client raw``) send one-row
requests in closed loops at 1, 8, 32 and 64 concurrent clients. Reported: p50/p99 latency,
requests/s, server CPU per request (all its processes), the ratios, and the issue's goals.

    .venv/bin/python bench/serve.py --client raw            # ~4 min
    .venv/bin/python bench/serve.py --client raw --quick    # ~1.5 min
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

# At module level: the route's annotations are resolved in these globals.
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

ROOT = Path(__file__).resolve().parents[1]
CONCURRENCY = (1, 8, 32, 64)


# -- servers (run in child processes) ------------------------------------------------------


def bare_app() -> Any:
    """The baseline: the same handler behind one FastAPI route, one model thread."""
    import concurrent.futures

    from aifab.inference.loading import load_served_model

    handler = load_served_model("churn@champion").handler
    pool = concurrent.futures.ThreadPoolExecutor(1)
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/predict", response_model=None)
    async def predict(request: Request) -> JSONResponse:
        payload = json.loads(await request.body())
        items = handler.decode(payload)
        loop = asyncio.get_running_loop()
        outputs = await loop.run_in_executor(pool, handler.predict, items)
        return JSONResponse({"predictions": [handler.encode(o) for o in outputs]})

    return app


def floor_app() -> Any:
    """The floor: JSON in, the same transform and weights in NumPy, JSON out; nothing else."""
    import datetime as dt

    import numpy as np
    import pyarrow as pa
    from safetensors.numpy import load_file

    from aifab.data.feature_eval import ARROW_TYPES
    from aifab.data.feature_transform import FeatureTransform
    from aifab.models.checkpoint import read_sidecar
    from aifab.models.inputs import numeric_matrix
    from aifab.track.registry import download_model

    model_dir = download_model("churn@champion")
    pre = read_sidecar(model_dir)["meta"]["preprocess"]
    ft = FeatureTransform.load(model_dir / pre["feature_transform"]["file"])
    used = {f.column for f in ft.spec.features}
    types = {c["name"]: ARROW_TYPES[c["type"]] for c in ft.input_schema if c["name"] in used}
    weights = load_file(str(model_dir / "model.safetensors"))
    layers = [(weights[f"{i}.weight"].T, weights[f"{i}.bias"]) for i in (0, 2, 4)]
    features, classes = list(pre["features"]), list(pre["classes"])
    ft.transform_table(pa.table({n: pa.nulls(1, t) for n, t in types.items()}))  # compile now
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/predict", response_model=None)
    async def predict(request: Request) -> JSONResponse:
        records = json.loads(await request.body())["records"]
        cols = {}
        for name, t in types.items():
            values = [r.get(name) for r in records]
            if t == pa.date32():
                values = [None if v is None else dt.date.fromisoformat(v) for v in values]
            cols[name] = pa.array(values, t)
        x = numeric_matrix(ft.transform_table(pa.table(cols)), features)
        for k, (w, b) in enumerate(layers):
            x = x @ w + b
            if k < len(layers) - 1:
                np.maximum(x, 0, out=x)
        z = np.exp(x - x.max(axis=1, keepdims=True))
        z /= z.sum(axis=1, keepdims=True)
        labels = z.argmax(axis=1).tolist()
        return JSONResponse(
            {
                "predictions": [
                    {"label": classes[k], "probabilities": dict(zip(classes, p, strict=True))}
                    for k, p in zip(labels, z.tolist(), strict=True)
                ]
            }
        )

    return app


def run_server(kind: str, port: int, log_sample: float) -> None:
    """Serve ``kind`` (floor | bare | aifab) on 127.0.0.1:port until killed."""
    import uvicorn

    if kind == "floor":
        app = floor_app()
    elif kind == "bare":
        app = bare_app()
    else:
        from aifab.serve.app import create_app

        app = create_app(reconcile_interval_s=5.0, request_log_sample=log_sample)
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=75,  # as aifab.serve.server.serve
    )


# -- setup ----------------------------------------------------------------------------------


def prepare(home: Path) -> tuple[str, dict[str, Any]]:
    """Train/register the churn model if needed, deploy it twice, make a key; a sample row."""
    os.environ["AIFAB_HOME"] = str(home)
    from aifab.inference.deployments import create_deployment, list_deployments
    from aifab.inference.loading import load_served_model
    from aifab.serve.keys import create_key
    from aifab.track.registry import resolve_model

    try:
        resolve_model("churn@champion")
    except Exception:  # noqa: BLE001 - first run in this workspace
        from aifab.pipeline.runner import run_pipeline

        print("training the quickstart churn model (once per workspace)...", flush=True)
        run_pipeline(ROOT / "examples" / "quickstart" / "pipeline.yaml")
    have = {d["name"] for d in list_deployments()}
    if "churn" not in have:
        create_deployment("churn@champion", name="churn")
    if "churn-batch" not in have:
        create_deployment("churn@champion", name="churn-batch", max_batch_size=32, max_wait_ms=2)
    _, secret = create_key("client", name="bench", rate=None)
    handler = load_served_model("churn@champion").handler
    row = _sample_row(handler)
    return secret, row


def _sample_row(handler: Any) -> dict[str, Any]:
    import datetime as dt

    from aifab.data.catalog import resolve
    from aifab.models.checkpoint import read_sidecar
    from aifab.track.registry import download_model
    from aifab.train.datasets import read_table

    ref = read_sidecar(download_model("churn@champion"))["meta"]["datasets"][0]["ref"]
    raw = read_table(resolve(ref)).slice(0, 1).to_pylist()[0]
    return {
        c: (raw[c].isoformat() if isinstance(raw[c], dt.date) else raw[c])
        for c in handler.input_columns
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(kind: str, home: Path, log_sample: float) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {**os.environ, "AIFAB_HOME": str(home)}
    if kind.startswith("aifab-w"):  # the real command, with N worker processes
        cmd = [sys.executable, "-c", "from aifab.cli.main import main; main()", "serve"]
        cmd += ["--port", str(port), "--workers", kind.removeprefix("aifab-w"), "--no-worker"]
        cmd += ["--log-sample", str(log_sample)]
    else:
        cmd = [sys.executable, __file__, "--server", kind, "--port", str(port)]
        cmd += ["--log-sample", str(log_sample)]
    if kind == "floor":  # one-row matmuls: BLAS threads only contend for the 2 cores
        env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, env=env)
    import httpx

    deadline = time.monotonic() + 180
    path = "/healthz" if kind in ("bare", "floor") else "/readyz"
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2).status_code == 200:
                return proc, port
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{kind} server did not start")
        time.sleep(0.2)


# -- load generation ------------------------------------------------------------------------


class RawClient:
    """A minimal keep-alive HTTP/1.1 client: far cheaper per request than httpx."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.writer.write(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"{head}Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        status_line = await self.reader.readline()
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        data = await self.reader.readexactly(length)
        return int(status_line.split()[1]), data

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def load(
    port: int,
    path: str,
    headers: dict[str, str],
    body: bytes,
    clients: int,
    seconds: float,
    warmup: float,
    client_kind: str,
) -> dict[str, float]:
    """``clients`` closed-loop clients for ``warmup + seconds``; stats of the timed part."""
    import httpx

    latencies: list[float] = []
    errors = 0
    answered = 0
    t_start = time.perf_counter()
    t_measure = t_start + warmup
    t_end = t_measure + seconds

    async def one_httpx(client: httpx.AsyncClient) -> None:
        nonlocal errors, answered
        while True:
            t0 = time.perf_counter()
            if t0 >= t_end:
                return
            r = await client.post(path, content=body, headers=headers)
            t1 = time.perf_counter()
            answered += 1
            if r.status_code != 200:
                errors += 1
            elif t0 >= t_measure:
                latencies.append(t1 - t0)

    async def one_raw() -> None:
        nonlocal errors, answered
        c = RawClient(port)
        try:
            while True:
                t0 = time.perf_counter()
                if t0 >= t_end:
                    return
                status, _ = await c.post(path, body, headers)
                t1 = time.perf_counter()
                answered += 1
                if status != 200:
                    errors += 1
                elif t0 >= t_measure:
                    latencies.append(t1 - t0)
        finally:
            await c.close()

    if client_kind == "raw":
        await asyncio.gather(*(one_raw() for _ in range(clients)))
    else:
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            limits=limits,
            timeout=60,
            headers={"content-type": "application/json"},
        ) as client:
            await asyncio.gather(*(one_httpx(client) for _ in range(clients)))
    latencies.sort()
    n = len(latencies)
    return {
        "answered": answered,
        "p50_ms": latencies[n // 2] * 1e3 if n else float("nan"),
        "p99_ms": latencies[min(n - 1, int(n * 0.99))] * 1e3 if n else float("nan"),
        "rps": n / seconds,
        "errors": errors,
    }


CONTENDERS = {  # name -> (server kind, path, authenticated)
    "floor": ("floor", "/predict", False),
    "bare": ("bare", "/predict", False),
    "aifab": ("aifab", "/v1/predict/churn", True),
    "aifab-batch": ("aifab", "/v1/predict/churn-batch", True),
    "aifab-w2": ("aifab-w2", "/v1/predict/churn", True),
}


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a server and its worker processes."""
    proc = psutil.Process(pid)
    procs = [proc, *proc.children(recursive=True)]
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += sum(p.cpu_times()[:2])
    return total


def main() -> None:
    """Run every contender at every concurrency and print the table and the ratios."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2 s per point, 1 repeat.")
    ap.add_argument("--seconds", type=float, default=5.0, help="Measured seconds per point.")
    ap.add_argument("--repeats", type=int, default=3, help="Repeats per point (median).")
    ap.add_argument("--client", choices=("httpx", "raw"), default="httpx")
    ap.add_argument("--log-sample", type=float, default=1.0, help="aifab request-log sampling.")
    ap.add_argument(
        "--contenders", default=",".join(CONTENDERS), help="Comma-separated subset to run."
    )
    ap.add_argument("--clients", default="1,8,32,64", help="Concurrencies, comma-separated.")
    ap.add_argument("--home", type=Path, help="Workspace to reuse (default: a scratch one).")
    ap.add_argument("--server", choices=("floor", "bare", "aifab"), help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.server:
        run_server(args.server, args.port, args.log_sample)
        return
    if args.quick:
        args.seconds, args.repeats = 2.0, 1
    names = [n.strip() for n in args.contenders.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        raise SystemExit(f"unknown contenders: {unknown} (known: {', '.join(CONTENDERS)})")
    concurrency = [int(c) for c in args.clients.split(",")]
    home = args.home or Path(tempfile.mkdtemp(prefix="aifab-bench-serve-")) / "ws"
    secret, row = prepare(home)
    body = json.dumps({"records": [row]}).encode()
    auth = {"Authorization": f"Bearer {secret}"}
    procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        for kind in dict.fromkeys(CONTENDERS[n][0] for n in names):
            procs[kind] = start(kind, home, args.log_sample)
        results: dict[tuple[str, int], dict[str, float]] = {}
        for clients in concurrency:
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
            # Interleave contenders within each repeat so drift (thermal, noise) hits all.
            for _ in range(args.repeats):
                for name in names:
                    kind, path, authed = CONTENDERS[name]
                    proc, port = procs[kind]
                    cpu0 = _cpu_s(proc.pid)
                    stats = asyncio.run(
                        load(
                            port,
                            path,
                            auth if authed else {},
                            body,
                            clients,
                            args.seconds,
                            warmup=0.5 if args.quick else 1.0,
                            client_kind=args.client,
                        )
                    )
                    # Server CPU per answered request (warm-up included in both terms).
                    cpu = _cpu_s(proc.pid) - cpu0
                    stats["cpu_ms"] = cpu * 1e3 / max(1.0, stats.pop("answered"))
                    runs[name].append(stats)
            for name, rs in runs.items():
                results[(name, clients)] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
                r = results[(name, clients)]
                print(
                    f"{name:12s} clients={clients:3d}  p50={r['p50_ms']:7.2f} ms  "
                    f"p99={r['p99_ms']:7.2f} ms  {r['rps']:8.1f} req/s  "
                    f"server CPU {r['cpu_ms']:5.2f} ms/req  errors={r['errors']:.0f}",
                    flush=True,
                )
        print_summary(results, names, concurrency)
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait(timeout=30)


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def print_summary(
    results: dict[tuple[str, int], dict[str, float]], names: list[str], concurrency: list[int]
) -> None:
    """Per concurrency: each contender's p50/p99 and req/s; then the issue's goals."""
    print("\nclients | " + " | ".join(f"{n} p50/p99 ms, req/s, CPU ms/req" for n in names))
    for c in concurrency:
        cells = []
        for n in names:
            r = results[(n, c)]
            cells.append(
                f"{r['p50_ms']:6.2f}/{r['p99_ms']:6.2f}, {r['rps']:7.1f}, {r['cpu_ms']:.2f}"
            )
        print(f"{c:7d} | " + " | ".join(cells))
    have = {n for n in names}
    print("\ngoals (issue 9):")
    for c in (1, 8):
        if {"aifab", "floor"} <= have and c in concurrency:
            a, f = results[("aifab", c)]["rps"], results[("floor", c)]["rps"]
            print(
                f"  aifab/floor req/s at {c} clients: {a:.0f}/{f:.0f} = {_ratio(a, f):.2f}x "
                "(goal >= 0.7x and >= 1000 req/s)"
            )
    if "aifab" in have and 1 in concurrency:
        print(
            f"  aifab server CPU per one-row request: {results[('aifab', 1)]['cpu_ms']:.2f} ms "
            "(goal <= 1 ms)"
        )
    for c, goal in ((32, 50), (64, 100)):
        if "aifab-batch" in have and c in concurrency:
            print(
                f"  aifab batched P99 at {c} clients: {results[('aifab-batch', c)]['p99_ms']:.1f}"
                f" ms (goal < {goal} ms)"
            )
    for c in concurrency:
        if {"aifab", "aifab-w2"} <= have and c >= 8:
            a, w = results[("aifab", c)]["rps"], results[("aifab-w2", c)]["rps"]
            print(
                f"  --workers 2 / 1 worker req/s at {c} clients: {w:.0f}/{a:.0f} = "
                f"{_ratio(w, a):.2f}x (goal >= 1.6x)"
            )


if __name__ == "__main__":
    main()
