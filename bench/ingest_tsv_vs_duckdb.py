"""A TSV of ~886k rows (~76 MB): aifab ingest (every integrity check) vs DuckDB COPY, one run.

Each contender runs in its own subprocess on the same file (wall seconds, the child's peak RSS
from ``os.wait4``); prints both and the speed ratio (issue 21 goal: aifab >= 0.5x DuckDB).

    .venv/bin/python bench/ingest_tsv_vs_duckdb.py --rows 886000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DUCKDB = (
    "import duckdb, sys; duckdb.connect().execute(f\"COPY (SELECT * FROM read_csv('{sys.argv[1]}'))"
    " TO '{sys.argv[2]}' (FORMAT parquet, COMPRESSION zstd)\")"
)
AIFAB = "import sys; from aifab.data.ingest import ingest; print(ingest('tsv', sys.argv[1]).rows)"


def _make(path: Path, rows: int) -> None:
    """Ids, counts, scores, dates, words and a free-text field, tab-separated with a header."""
    import duckdb

    duckdb.connect().execute(f"""COPY (SELECT range AS id, hash(range) % 1000 AS count,
        round((hash(range * 3) % 100000) / 1000.0, 3) AS score,
        DATE '2020-01-01' + CAST(hash(range * 5) % 1500 AS INTEGER) AS day,
        ['alpha', 'beta', 'gamma', 'delta'][1 + CAST(hash(range * 7) % 4 AS BIGINT)] AS word,
        'note ' || md5(range::VARCHAR) AS text FROM range({rows}))
        TO '{path}' (HEADER, DELIMITER '\t')""")


def _run(code: str, args: list[str], home: Path) -> tuple[float, float]:
    env = {**os.environ, "AIFAB_HOME": str(home), "AIFAB_ACTOR": "bench"}
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, *args], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"child failed: {code[:60]}")
    return time.perf_counter() - t, usage.ru_maxrss / 1024


def main() -> None:
    """Generate the TSV, run both contenders, print the table and the ratio."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=886_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "table.tsv"
        _make(src, args.rows)
        print(f"input: {args.rows:,} rows, {src.stat().st_size / 1e6:.0f} MB TSV")
        duck = _run(DUCKDB, [str(src), str(Path(tmp) / "d.parquet")], Path(tmp) / "d")
        ours = _run(AIFAB, [str(src)], Path(tmp) / "ws")
    print(f"{'contender':<12}{'wall s':>8}{'peak RSS MB':>13}")
    for label, (secs, rss) in (("duckdb COPY", duck), ("aifab", ours)):
        print(f"{label:<12}{secs:>8.2f}{rss:>13.0f}")
    print(f"aifab speed vs DuckDB COPY: {duck[0] / ours[0]:.2f}x (goal >= 0.5x)")


if __name__ == "__main__":
    main()
