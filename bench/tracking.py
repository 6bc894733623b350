"""Metric logging: aifab's buffered ``Run.log_metrics`` vs ``MlflowClient.log_metric`` per point.

Both write to the same MLflow SQLite store in a scratch workspace, in one process. aifab is timed
on two shapes (100 steps x 200 metrics, and 10,000 single-metric steps); the baseline on fewer
points since each costs milliseconds. Reported: microseconds per point in the training loop,
the time ``end()`` takes to flush what is still buffered, and the ratios (median of repeats).

    .venv/bin/python bench/tracking.py --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any


def aifab_wide(steps: int, metrics: int) -> tuple[float, float, int]:
    """Log ``steps`` x ``metrics`` points; return (loop seconds, end() seconds, points)."""
    from aifab.track import start_run

    names = [f"layer{i}/grad_norm" for i in range(metrics)]
    run = start_run("bench", run_name="wide", system_metrics=False)
    t0 = time.perf_counter()
    for step in range(steps):
        run.log_metrics({n: step * 0.001 + i for i, n in enumerate(names)}, step=step)
    t1 = time.perf_counter()
    run.end()
    return t1 - t0, time.perf_counter() - t1, steps * metrics


def aifab_single(steps: int) -> tuple[float, float, int]:
    """Log one metric per step for ``steps`` steps (a per-batch loss)."""
    from aifab.track import start_run

    run = start_run("bench", run_name="single", system_metrics=False)
    t0 = time.perf_counter()
    for step in range(steps):
        run.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
    t1 = time.perf_counter()
    run.end()
    return t1 - t0, time.perf_counter() - t1, steps


def mlflow_per_point(points: int) -> tuple[float, float, int]:
    """The baseline: one ``MlflowClient.log_metric`` call per point, same store."""
    from aifab.track.tracking import experiment_id, get_client

    client = get_client()
    run_id = client.create_run(experiment_id("bench"), run_name="baseline").info.run_id
    t0 = time.perf_counter()
    for i in range(points):
        client.log_metric(run_id, f"m{i % 3}", i * 0.5, step=i // 3)
    t1 = time.perf_counter()
    client.set_terminated(run_id)
    return t1 - t0, 0.0, points


def median_of(fn: Callable[[], tuple[float, float, int]], repeats: int) -> dict[str, Any]:
    """Median loop and end() times over ``repeats`` runs, per point in microseconds."""
    results = [fn() for _ in range(repeats)]
    loop = statistics.median(r[0] for r in results)
    end = statistics.median(r[1] for r in results)
    n = results[0][2]
    return {
        "points": n,
        "us_per_point": loop / n * 1e6,
        "end_s": end,
        "total_us_per_point": (loop + end) / n * 1e6,
    }


def main() -> None:
    """Run the contenders and print one table with the ratios."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline-points", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["AIFAB_HOME"] = home
        os.environ.pop("AIFAB_TRACKING_URI", None)
        from aifab.track import tracking_uri

        print(f"store: {tracking_uri()}  python {sys.version.split()[0]}  cpus {os.cpu_count()}")
        aifab_single(200)  # warm-up: schema creation, imports, first run
        mlflow_per_point(30)
        rows = {
            "aifab 100 steps x 200 metrics": median_of(lambda: aifab_wide(100, 200), args.repeats),
            "aifab 10,000 steps x 1 metric": median_of(lambda: aifab_single(10_000), args.repeats),
            "mlflow log_metric per point": median_of(
                lambda: mlflow_per_point(args.baseline_points), args.repeats
            ),
        }
    base = rows["mlflow log_metric per point"]["us_per_point"]
    print(f"{'contender':32} {'points':>7} {'us/point':>10} {'end() s':>8} "
          f"{'total us/pt':>12} {'loop x faster':>14} {'total x faster':>15}")  # fmt: skip
    for name, r in rows.items():
        print(
            f"{name:32} {r['points']:>7} {r['us_per_point']:>10.2f} {r['end_s']:>8.2f} "
            f"{r['total_us_per_point']:>12.1f} {base / r['us_per_point']:>14.0f} "
            f"{base / r['total_us_per_point']:>15.1f}"
        )


if __name__ == "__main__":
    main()
