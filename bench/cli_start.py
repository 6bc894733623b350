"""CLI start-up: read-only commands vs ``aifab --help`` (the floor: Python, typer, the app).

A workspace with 3 datasets, 3 tracked runs and a registered model is made once; each command
then runs as a fresh process, median of 5 after one warm-up, as wall time and as CPU time. The
``(ORM path)`` and ``(MLflow path)`` rows are the same listings through the service functions
(``AIFAB_DB_URL`` or ``AIFAB_TRACKING_URI`` naming the same SQLite file turns the fast path
off): what those commands cost before their fast paths.
Run: PYTHONPATH=src python bench/cli_start.py
"""

from __future__ import annotations

import os
import resource
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


def medians(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Median wall seconds and median CPU seconds (user + system) of the command."""
    cmd = [sys.executable, "-m", "aifab", *args]
    walls, cpus = [], []
    for i in range(REPEATS + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, check=False)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"aifab {' '.join(args)} failed: {done.stderr.decode()[-500:]}")
        if i:  # the first run warms the OS file cache
            walls.append(wall)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    _workspace()
    env = dict(os.environ)
    orm = {**env, "AIFAB_DB_URL": f"sqlite:///{HOME / 'aifab.db'}"}
    mlflow = {**env, "AIFAB_TRACKING_URI": f"sqlite:///{HOME / 'mlflow.db'}"}
    cases: list[tuple[str, list[str], dict[str, str]]] = [
        ("data list", ["data", "list"], env),
        ("data list (ORM path)", ["data", "list"], orm),
        ("data show customers", ["data", "show", "customers"], env),
        ("data head customers", ["data", "head", "customers"], env),
        ("runs list", ["runs", "list"], env),
        ("runs list (MLflow path)", ["runs", "list"], mlflow),
        ("models list", ["models", "list"], env),
        ("models list (MLflow path)", ["models", "list"], mlflow),
    ]
    base_wall, base_cpu = medians(["--help"], env)
    print(f"{'command':<26} {'wall s':>7} {'x --help':>9} {'CPU s':>7} {'x --help':>9}")
    print(f"{'--help (baseline)':<26} {base_wall:7.3f} {1.0:9.2f} {base_cpu:7.3f} {1.0:9.2f}")
    for label, args, case_env in cases:
        wall, cpu = medians(args, case_env)
        print(f"{label:<26} {wall:7.3f} {wall / base_wall:9.2f} {cpu:7.3f} {cpu / base_cpu:9.2f}")
    load = os.getloadavg()[0]
    print(f"(median of {REPEATS} fresh processes each; CPU is user + system time, steadier than")
    print(f" wall time on a shared machine; 1-minute load average at the end {load:.1f})")


if __name__ == "__main__":
    main()
