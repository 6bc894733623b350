"""Dashboard pages of runs, models and deployments with 10,000 runs in the MLflow store.

Server time per page (p50/p99 over repeated requests through the real app, in-process) of the
runs list (first page and a page 9,950 runs deep), a run's curves, a two-run comparison, the
models pages and a deployment page, beside the baseline: MLflow's own ``search_runs`` for one
page of runs, called directly. The deployment has 20,000 logged requests in the last hour.
The 10k runs are copies of one real run made with MLflow, inserted into its SQLite tables in
bulk (MLflow takes ~50 ms to create each).

    .venv/bin/python bench/ui_runs.py --runs 10000 --requests 40
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any


def seed(runs: int) -> tuple[str, str]:
    """One real run with a 200-point curve and model ``bench@1``; ``runs`` copies of its row."""
    from aifab.core.workspace import get_workspace
    from aifab.inference.deployments import create_deployment
    from aifab.track import register_model, start_run

    weights = get_workspace().tmp / "weights.txt"
    weights.write_text("placeholder")
    with start_run("bench-ui", run_name="real", params={"lr": 0.1}, system_metrics=False) as run:
        for step in range(200):
            run.log_metrics({"loss": 1.0 / (step + 1), "acc": step / 200}, step=step)
        run.log_artifact(weights, "model")
    register_model(run.id, "model", "bench")
    create_deployment("bench@1", name="bench")
    _traffic(20_000)
    db = sqlite3.connect(get_workspace().root / "mlflow.db")
    row = db.execute("SELECT * FROM runs WHERE run_uuid = ?", (run.id,)).fetchone()
    cols = [d[0] for d in db.execute("SELECT * FROM runs LIMIT 0").description]
    copies, metrics, params = [], [], []
    for i in range(runs):
        rid = uuid.uuid4().hex
        values = dict(zip(cols, row, strict=True))
        values.update(run_uuid=rid, name=f"copy-{i}", start_time=values["start_time"] - 1000 * i)
        copies.append(tuple(values[c] for c in cols))
        metrics.append(("loss", 1.0 / (i + 1), 0, 0, 0, rid))
        params.append(("lr", str(i), rid))
    db.executemany(f"INSERT INTO runs VALUES ({', '.join('?' * len(cols))})", copies)
    db.executemany(
        "INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        metrics,
    )
    db.executemany("INSERT INTO params (key, value, run_uuid) VALUES (?, ?, ?)", params)
    db.commit()
    db.close()
    return run.id, copies[-1][cols.index("run_uuid")]


def _traffic(requests: int) -> None:
    """``requests`` logged predictions of ``bench`` spread over the last hour."""
    from aifab.inference.request_log import RequestLogger

    logger = RequestLogger()
    now = time.time()
    for i in range(requests):
        status = 500 if i % 100 == 0 else 200
        logger.log({"ts": now - 3600 * i / requests, "deployment": "bench", "route": "/v1/predict",
                    "status": status, "latency_ms": 1.0 + i % 13})  # fmt: skip
    logger.close()


def timed(fn: Callable[[], Any], n: int) -> tuple[float, float]:
    """(p50, p99) milliseconds of ``fn`` over ``n`` calls after two warm-ups."""
    fn()
    fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(n - 1, int(n * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    os.environ["AIFAB_HOME"] = tempfile.mkdtemp(prefix="bench-ui-")
    os.environ.setdefault("AIFAB_ACTOR", "user:bench")
    from fastapi.testclient import TestClient

    from aifab.serve.app import create_app
    from aifab.serve.keys import create_key
    from aifab.track.tracking import experiment_id, get_client

    t0 = time.perf_counter()
    real, deep = seed(args.runs)
    print(f"seeded {args.runs + 1} runs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    client = get_client()
    exp = experiment_id("bench-ui", create=False)
    base50, base99 = timed(
        lambda: client.search_runs([exp], max_results=51, order_by=["attributes.start_time DESC"]),
        args.requests,
    )
    print(f"baseline mlflow search_runs, one page of 50: p50 {base50:.1f} ms, p99 {base99:.1f} ms")
    _, secret = create_key("viewer", name="bench")
    with TestClient(create_app(), base_url="http://127.0.0.1") as web:
        assert web.post("/ui/login", data={"key": secret}).status_code == 200
        pages = {
            "/ui/runs": "runs, first page",
            "/ui/runs?offset=9950": "runs, 9,950 deep",
            f"/ui/runs/{real}": "run with 2 curves x 200 points",
            f"/ui/runs/compare?run={real}&run={deep}": "compare two runs",
            "/ui/models": "models",
            "/ui/models/bench/1": "model version",
            "/ui/deployments/bench": "deployment, 20k requests in 1 h",
        }
        for path, label in pages.items():
            assert web.get(path).status_code == 200, path
            p50, p99 = timed(lambda p=path: web.get(p), args.requests)
            print(
                f"{label:34s} p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  "
                f"(p50 / baseline p50 {p50 / base50:.2f}x)"
            )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    main()
