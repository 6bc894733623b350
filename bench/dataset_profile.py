"""Column profile of a wide table: aifab's batched profile vs the single-aggregate baseline it
replaced vs pandas ``describe`` + ``nunique``, one run.

Each contender runs in its own subprocess (so peak RSS is its own) on the same Parquet input
(half numeric columns with NaN and inf, half strings). The single-aggregate baseline (one
``SELECT`` with a ``count(DISTINCT)`` per column) gets ``--baseline-timeout`` seconds; it did not
finish 2,000 columns before.

    .venv/bin/python bench/dataset_profile.py --columns 2000 --rows 10000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path


def make_input(path: Path, columns: int, rows: int) -> None:
    """Write the wide table: even columns DOUBLE (some NaN/inf), odd columns VARCHAR."""
    import duckdb

    cols = []
    for i in range(columns):
        if i % 2 == 0:
            cols.append(
                f"CASE WHEN range % 101 = {i % 101} THEN 'nan'::DOUBLE "
                f"WHEN range % 211 = {i % 211} THEN 'inf'::DOUBLE "
                f"ELSE (hash(range * {i + 1}) % 100000) / 7.0 END AS c{i}"
            )
        else:
            cols.append(f"'v' || (hash(range + {i}) % 500) AS c{i}")
    duckdb.connect().execute(
        f"COPY (SELECT {', '.join(cols)} FROM range({rows})) TO '{path}' (FORMAT parquet)"
    )


def _aifab(path: str) -> dict[str, object]:
    import duckdb

    from aifab.data.profile import profile_relation

    profile = profile_relation(duckdb.connect(), f"read_parquet('{path}')")
    return {"columns": len(profile["columns"])}


def _single_aggregate(path: str) -> dict[str, object]:
    """The old plan: one aggregate with an exact distinct count per column."""
    import duckdb

    con = duckdb.connect()
    rel = f"read_parquet('{path}')"
    names = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {rel}").fetchall()]
    aggs = ", ".join(f'count("{n}"), count(DISTINCT "{n}")' for n in names)
    con.execute(f"SELECT {aggs} FROM {rel}").fetchall()
    return {"columns": len(names)}


def _pandas(path: str) -> dict[str, object]:
    import pandas as pd

    df = pd.read_parquet(path)
    df.describe(include="all")
    df.nunique()
    return {"columns": df.shape[1]}


CONTENDERS = {"aifab": _aifab, "single_aggregate": _single_aggregate, "pandas": _pandas}


def _peak_rss_mb() -> float:
    """This process's own high-water RSS (``ru_maxrss`` would include the parent's at fork)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(name: str, path: str) -> None:
    """Run one contender and print its seconds and peak RSS as JSON."""
    warnings.simplefilter("ignore")  # pandas warns once per column about inf - inf
    start = time.perf_counter()
    out = CONTENDERS[name](path)
    seconds = time.perf_counter() - start
    print(json.dumps({**out, "seconds": seconds, "peak_rss_mb": _peak_rss_mb()}))


def run(name: str, path: Path, timeout: float) -> dict[str, object]:
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", name, str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish in {timeout:.0f} s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--columns", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--baseline-timeout", type=float, default=60.0)
    parser.add_argument("--child", nargs=2, metavar=("NAME", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "wide.parquet"
        make_input(path, args.columns, args.rows)
        print(f"profile of {args.columns} columns x {args.rows} rows")
        results = {
            name: run(name, path, args.baseline_timeout if name != "aifab" else 600.0)
            for name in CONTENDERS
        }
    for name, r in results.items():
        if "error" in r:
            print(f"  {name:17s} {r['error']}")
        else:
            print(f"  {name:17s} {r['seconds']:7.2f} s  peak RSS {r['peak_rss_mb']:7.0f} MB")
    ours = results["aifab"]
    for name in ("single_aggregate", "pandas"):
        other = results[name]
        if "error" not in ours and "error" not in other:
            ratio = float(other["seconds"]) / float(ours["seconds"])  # type: ignore[arg-type]
            print(f"  {name} / aifab time: {ratio:.2f}x")


if __name__ == "__main__":
    main()
