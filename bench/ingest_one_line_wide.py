"""A one-line CSV of thousands of numbers: aifab ingest (with its profile) vs DuckDB COPY, one run.

Issue 21: 20,190 columns never finished (cost grew faster than the columns). Each contender
runs in its own subprocess on the same file; prints both times and the ratio, per size, so
that the growth with the column count shows.

    .venv/bin/python bench/ingest_one_line_wide.py --cols 5000,20000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

DUCKDB = """
import duckdb, json, sys, time
t = time.perf_counter()
duckdb.connect().execute(
    f"COPY (SELECT * FROM read_csv('{sys.argv[1]}')) TO '{sys.argv[2]}' (FORMAT parquet)"
)
print(json.dumps({"s": time.perf_counter() - t}))
"""

AIFAB = """
import json, sys, time
from aifab.data.ingest import ingest
from aifab.data.catalog import resolve
t = time.perf_counter()
r = ingest("wide", sys.argv[1])
assert r.rows == 1 and len(resolve("wide").profile["columns"]) == len(r.version.columns)
print(json.dumps({"s": time.perf_counter() - t, "columns": len(r.version.columns)}))
"""


def _run(code: str, args: list[str], home: Path) -> dict[str, float]:
    env = {**os.environ, "AIFAB_HOME": str(home), "AIFAB_ACTOR": "bench"}
    out = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    """Generate one file per size, time both contenders, print the table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cols", default="1000,5000,20000", help="Comma-separated column counts.")
    args = ap.parse_args()
    print(f"{'columns':>8}{'duckdb s':>10}{'aifab s':>10}{'aifab/duckdb':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for cols in (int(c) for c in args.cols.split(",")):
            src = Path(tmp) / f"wide{cols}.csv"
            src.write_text(",".join(f"{i}.5" for i in range(cols)) + "\n")
            duck = _run(DUCKDB, [str(src), str(Path(tmp) / "d.parquet")], Path(tmp) / "d")
            ours = _run(AIFAB, [str(src)], Path(tmp) / f"ws{cols}")
            ratio = ours["s"] / duck["s"]
            print(f"{cols:>8}{duck['s']:>10.2f}{ours['s']:>10.2f}{ratio:>13.2f}x", flush=True)


if __name__ == "__main__":
    main()
