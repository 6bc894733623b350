"""Ingest benchmarks: a large CSV, a wide table and a set of messy files, aifab vs baselines.

``big``: a synthetic CSV of ``--size-mb`` (numeric, string and date columns), aifab (DuckDB COPY
-> staged Parquet -> catalog) vs pandas chunks -> pyarrow, each in its own child process: rows/s,
wall seconds and the child's peak RSS (``os.wait4``'s rusage, so each figure is one child's).
``wide``: ``--wide-cols`` x ``--wide-rows`` (2,000 x 10,000), aifab ingest then profile vs
pandas ``read_csv`` + ``describe``: seconds and peak RSS per phase (goal <= 30 s, <= 2 GB).
``messy``: the shapes of ``ingest_shapes.py``; every row must be kept (padded), quarantined or
refused with the file, counted against pandas and DuckDB read with default options.

    python bench/ingest.py --parts big,wide,messy --size-mb 200 --out /tmp/bench-ingest
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

AIFAB_CHILD = """
import json, sys
from aifab.data.ingest import ingest
r = ingest("bench", sys.argv[1])
print(json.dumps({"rows": r.rows, "rejected": r.rejected, "version": r.version.ref}))
"""

PANDAS_CHILD = """
import json, sys
import pandas as pd, pyarrow as pa, pyarrow.parquet as pq
src, out, chunksize = sys.argv[1], sys.argv[2], int(sys.argv[3])
writer, rows = None, 0
for chunk in pd.read_csv(src, chunksize=chunksize, parse_dates=["day"]):
    table = pa.Table.from_pandas(chunk, preserve_index=False)
    if writer is None:
        writer = pq.ParquetWriter(out, table.schema, compression="zstd")
    writer.write_table(table)
    rows += len(chunk)
writer.close()
print(json.dumps({"rows": rows}))
"""


def generate_csv(path: Path, size_mb: int, chunk_rows: int = 200_000) -> int:
    """Write ``size_mb`` MB of synthetic rows in chunks; return the row count."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"])
    target = size_mb * 1024 * 1024
    rows = 0
    with path.open("w", encoding="utf-8", newline="") as fh:
        while fh.tell() < target:
            n = chunk_rows
            frame = pd.DataFrame(
                {
                    "id": np.arange(rows, rows + n),
                    "amount": rng.normal(100, 25, n).round(4),
                    "count": rng.integers(0, 10_000, n),
                    "category": rng.choice(words, n),
                    "name": np.char.add(
                        rng.choice(words, n), rng.integers(0, 99_999, n).astype(str)
                    ),
                    "day": pd.Timestamp("2020-01-01")
                    + pd.to_timedelta(rng.integers(0, 1500, n), "D"),
                }
            )
            frame.to_csv(fh, header=rows == 0, index=False, date_format="%Y-%m-%d")
            rows += n
    return rows


def run_child(args: list[str], env: dict[str, str]) -> dict[str, float]:
    """Run one child; return its JSON line plus wall seconds and peak RSS in MB."""
    start = time.perf_counter()
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode}): {' '.join(args[:3])}")
    result = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
    # Linux reports ru_maxrss in KiB.
    return {**result, "wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024}


def bench_big(args: argparse.Namespace, work: Path) -> None:
    """The large-CSV comparison (rows/s and peak RSS)."""
    csv = work / f"synthetic_{args.size_mb}mb.csv"
    try:
        if not csv.exists():
            t = time.perf_counter()
            n = generate_csv(csv, args.size_mb)
            print(
                f"generated {csv} ({csv.stat().st_size / 1e6:.0f} MB, {n} rows) "
                f"in {time.perf_counter() - t:.1f}s"
            )
        home = work / "aifab_home"
        shutil.rmtree(home, ignore_errors=True)  # a fresh catalog: the ingest is never a dedupe
        env = {
            **os.environ,
            "AIFAB_HOME": str(home),
            "AIFAB_ACTOR": "bench",
            "AIFAB_DUCKDB_MEMORY_LIMIT": args.memory_limit,
        }
        if args.threads:
            env["AIFAB_DUCKDB_THREADS"] = str(args.threads)
        aifab = run_child([sys.executable, "-c", AIFAB_CHILD, str(csv)], env)
        base = run_child(
            [
                sys.executable,
                "-c",
                PANDAS_CHILD,
                str(csv),
                str(work / "pandas.parquet"),
                str(args.chunksize),
            ],
            dict(os.environ),
        )
    finally:
        (work / "pandas.parquet").unlink(missing_ok=True)

    print(
        f"\nCSV {args.size_mb} MB; aifab DuckDB memory_limit={args.memory_limit}, "
        f"threads={args.threads or 'default'}; pandas chunksize={args.chunksize}"
    )
    print(f"{'tool':<28}{'rows':>12}{'wall s':>10}{'rows/s':>14}{'peak RSS MB':>14}")
    for label, r in [("pandas chunks -> pyarrow", base), ("aifab ingest", aifab)]:
        print(
            f"{label:<28}{int(r['rows']):>12}{r['wall_s']:>10.1f}"
            f"{r['rows'] / r['wall_s']:>14,.0f}{r['peak_rss_mb']:>14.0f}"
        )
    print(
        f"\naifab / pandas: speed x{base['wall_s'] / aifab['wall_s']:.2f}, "
        f"peak RSS x{aifab['peak_rss_mb'] / base['peak_rss_mb']:.2f}; "
        f"aifab RSS under 1 GB: {aifab['peak_rss_mb'] < 1024}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--parts", default="big,wide,messy", help="Which benchmarks to run.")
    ap.add_argument("--size-mb", type=int, default=1024, help="CSV size to generate.")
    ap.add_argument("--out", type=Path, default=None, help="Work dir (kept); default a temp dir.")
    ap.add_argument("--memory-limit", default="512MB", help="aifab's DuckDB memory limit.")
    ap.add_argument("--threads", type=int, default=None, help="DuckDB threads (default all).")
    ap.add_argument("--chunksize", type=int, default=200_000, help="pandas rows per chunk.")
    ap.add_argument("--wide-cols", type=int, default=2000, help="Columns of the wide table.")
    ap.add_argument("--wide-rows", type=int, default=10_000, help="Rows of the wide table.")
    ap.add_argument(
        "--profile-timeout", type=float, default=120.0, help="Seconds before a phase is cut off."
    )
    args = ap.parse_args()

    from ingest_wide_messy import bench_messy, bench_wide

    work = args.out or Path(tempfile.mkdtemp(prefix="aifab-bench-ingest-"))
    work.mkdir(parents=True, exist_ok=True)
    parts = {p.strip() for p in args.parts.split(",")}
    try:
        if "big" in parts:
            bench_big(args, work)
        if "wide" in parts:
            bench_wide(args, work)
        if "messy" in parts:
            bench_messy(args, work)
    finally:
        if args.out is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
