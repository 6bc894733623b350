"""Object store vs local workspace: ingest, clean and a training epoch's data loading.

One run, same data, same thread settings: each mode runs in its own child process (fresh
caches, fresh workspace) ``--repeats`` times, and the median seconds per phase are printed with
rows/s and the ratio store/local throughput (goal: >= 0.7x). The store is moto's standalone S3
server on 127.0.0.1 (the stand-in for S3/MinIO; a real S3 endpoint adds network latency, which
the read-through cache of immutable lake objects pays once per node). ``epoch (cold)`` loads the
dataset on a second, empty workspace directory (another node: it fetches the objects from the
store); ``epoch (warm)`` loads it again there.

    python bench/storage.py --rows 2000000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, os, sys, time
from aifab.core.db import reset_engines
from aifab.data.catalog import resolve
from aifab.data.clean import clean
from aifab.data.ingest import ingest
from aifab.train.datasets import read_table
csv, node2 = sys.argv[1], sys.argv[2]
out = {}
t = time.perf_counter(); ingest("bench", csv); out["ingest"] = time.perf_counter() - t
spec = {"steps": [{"fill_nulls": {"values": {"score": 0}}}, {"filter": {"where": "score >= 0"}}]}
t = time.perf_counter(); v = clean("bench", spec, output="clean").version
out["clean"] = time.perf_counter() - t
if node2:  # the store: read from another node's empty directory
    db = os.path.join(os.environ["AIFAB_HOME"], "aifab.db")
    os.environ["AIFAB_DB_URL"] = "sqlite:///" + db
    os.environ["AIFAB_HOME"] = node2
    reset_engines()
for phase in ("epoch (cold)", "epoch (warm)"):
    t = time.perf_counter(); rows = read_table(resolve("clean")).num_rows
    out[phase] = time.perf_counter() - t
out["rows"] = rows
print(json.dumps(out))
"""

PHASES = ("ingest", "clean", "epoch (cold)", "epoch (warm)")


def make_csv(path: Path, rows: int) -> None:
    """A CSV of ``rows`` rows: ids, a float with some blanks, a category, a text column."""
    import duckdb

    duckdb.execute(
        f"COPY (SELECT range AS id, CASE WHEN range % 17 = 0 THEN NULL ELSE random() END AS score,"
        f" 'cat' || (range % 13) AS cat, 'text number ' || range AS text FROM range({rows}))"
        f" TO '{path}' (HEADER, DELIMITER ',')"
    )


def run_child(csv: Path, env: dict[str, str], root: Path) -> dict[str, float]:
    """One mode once, in a fresh child process with fresh workspaces.

    Locally there is no other node: the epoch reads the lake the ingest wrote (cold = first).
    """
    node1 = tempfile.mkdtemp(dir=root)
    node2 = tempfile.mkdtemp(dir=root) if "AIFAB_STORAGE_URI" in env else ""
    env = {**env, "AIFAB_HOME": node1}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(csv), node2],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"child failed: {out.stderr[-2000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    """Run both modes, print the medians and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from moto_s3 import MotoS3Server

    root = Path(tempfile.mkdtemp(prefix="aifab-bench-storage-"))
    csv = root / "data.csv"
    make_csv(csv, args.rows)
    base = {k: v for k, v in os.environ.items() if not k.startswith("AIFAB_")}
    base["AIFAB_DUCKDB_THREADS"] = os.environ.get("AIFAB_DUCKDB_THREADS", "2")
    server = MotoS3Server()
    try:
        results: dict[str, list[dict[str, float]]] = {"local": [], "store": []}
        run_child(csv, base, root)  # warm-up: imports, page cache
        for _ in range(args.repeats):
            results["local"].append(run_child(csv, base, root))
            store_env = {**base, **server.env}
            store_env["AIFAB_STORAGE_URI"] = f"s3://{server.new_bucket()}/ws"
            results["store"].append(run_child(csv, store_env, root))
    finally:
        server.stop()
    print(f"rows: {args.rows:,}  csv: {csv.stat().st_size / 1e6:.0f} MB  repeats: {args.repeats}")
    print(
        f"{'phase':<14}{'local s':>10}{'store s':>10}{'local rows/s':>15}{'store rows/s':>15}"
        f"{'store/local':>13}"
    )
    for phase in PHASES:
        loc = statistics.median(r[phase] for r in results["local"])
        sto = statistics.median(r[phase] for r in results["store"])
        print(
            f"{phase:<14}{loc:>10.2f}{sto:>10.2f}{args.rows / loc:>15,.0f}"
            f"{args.rows / sto:>15,.0f}{loc / sto:>12.2f}x"
        )


if __name__ == "__main__":
    main()
