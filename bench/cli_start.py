"""CLI start-up: read-only commands vs ``aifab --help`` (the floor: Python, typer, the app).

A workspace with 3 datasets, 3 tracked runs and a registered model is made once; each command
then runs as a fresh process, median of 5 after one warm-up. ``data list (ORM path)`` is the
same listing through the service function (``AIFAB_DB_URL`` naming the same SQLite file turns
the fast path off): what ``data list`` cost before its fast path.
Run: PYTHONPATH=src python bench/cli_start.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOME = Path(tempfile.mkdtemp(prefix="bench-cli-start-")) / "ws"
os.environ["AIFAB_HOME"] = str(HOME)

from aifab.data import ingest  # noqa: E402
from aifab.track import get_client  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
REPEATS = 5


def _workspace() -> None:
    ingest("customers", str(EXAMPLES / "quickstart" / "data" / "customers.csv"))
    ingest("prices", str(EXAMPLES / "tour" / "prices.csv"))
    ingest("events", str(EXAMPLES / "tour" / "events.jsonl"))
    client = get_client()
    exp = client.create_experiment("bench")
    for i in range(3):
        run = client.create_run(exp, run_name=f"run-{i}")
        client.log_metric(run.info.run_id, "loss", 1.0 / (i + 1))
        client.set_terminated(run.info.run_id)
    client.create_registered_model("bench-model")
    client.create_model_version("bench-model", f"runs:/{run.info.run_id}/model", run.info.run_id)


def median_s(args: list[str], env: dict[str, str]) -> float:
    cmd = [sys.executable, "-m", "aifab", *args]
    times = []
    for i in range(REPEATS + 1):
        start = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, check=False)
        if i:  # the first run warms the OS file cache
            times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"aifab {' '.join(args)} failed: {done.stderr.decode()[-500:]}")
    return statistics.median(times)


def main() -> None:
    _workspace()
    env = dict(os.environ)
    orm = {**env, "AIFAB_DB_URL": f"sqlite:///{HOME / 'aifab.db'}"}
    cases: list[tuple[str, list[str], dict[str, str]]] = [
        ("data list", ["data", "list"], env),
        ("data list (ORM path)", ["data", "list"], orm),
        ("data show customers", ["data", "show", "customers"], env),
        ("data head customers", ["data", "head", "customers"], env),
        ("runs list", ["runs", "list"], env),
        ("models list", ["models", "list"], env),
    ]
    baseline = median_s(["--help"], env)
    print(f"{'command':<24} {'median s':>9} {'x --help':>9}")
    print(f"{'--help (baseline)':<24} {baseline:9.3f} {1.0:9.2f}")
    for label, args, case_env in cases:
        took = median_s(args, case_env)
        print(f"{label:<24} {took:9.3f} {took / baseline:9.2f}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"(median of {REPEATS} fresh processes each; 1-minute load average {load:.1f})")


if __name__ == "__main__":
    main()
