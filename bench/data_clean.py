"""Clean + features on a synthetic table: aifab vs polars, pandas and DuckDB SQL, one run.

Each contender runs in its own subprocess (so peak RSS is its own) on the same Parquet input,
with the same thread settings, a warm-up, and the median of ``--repeats`` timed runs.

    .venv/bin/python bench/data_clean.py --rows 5000000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLEAN = {
    "steps": [
        {"drop_duplicates": {"subset": ["id"]}},
        {"fill_nulls": {"strategy": {"age": "median"}, "values": {"country": "unknown"}}},
        {"filter": {"where": "age BETWEEN 0 AND 120"}},
        {"clip": {"columns": ["income"], "lower_quantile": 0.01, "upper_quantile": 0.99}},
        {"normalize_text": {"columns": ["country"], "trim": True, "lower": True}},
    ]
}
FEATURES = {
    "features": [
        {"column": "age", "transform": "standardize"},
        {"column": "income", "transform": "log1p"},
        {"column": "country", "transform": "onehot", "max_categories": 8},
        {"column": "signup", "transform": "date_parts", "parts": ["year", "month", "dayofweek"]},
    ],
    "passthrough": ["id", "churned"],
}


def make_input(path: Path, rows: int) -> None:
    """Write the synthetic table: ids with duplicates, nulls, outliers, messy categories."""
    import duckdb

    duckdb.connect().execute(f"""
        COPY (
          SELECT (range % {int(rows * 0.98)}) AS id,
                 CASE WHEN range % 50 = 0 THEN NULL
                      WHEN range % 997 = 0 THEN 400 ELSE 18 + (hash(range) % 60) END AS age,
                 exp(8 + (hash(range * 7) % 1000) / 250.0) AS income,
                 CASE WHEN range % 40 = 0 THEN NULL
                      ELSE ['  US', 'de ', 'FR', 'us', 'GB', 'JP', 'BR', 'IN', 'CN', 'ES']
                           [1 + CAST(hash(range * 3) % 10 AS BIGINT)] END AS country,
                 DATE '2020-01-01' + CAST(hash(range * 11) % 1500 AS INTEGER) AS signup,
                 (hash(range * 13) % 2)::INTEGER AS churned
          FROM range({rows})
        ) TO '{path}' (FORMAT parquet)
    """)


def run_pandas(src: str, out: str) -> None:
    """The same clean + features steps written in pandas."""
    import numpy as np
    import pandas as pd

    df = pd.read_parquet(src)
    df = df.drop_duplicates(subset=["id"], keep="first")
    df["age"] = df["age"].fillna(df["age"].median())
    df["country"] = df["country"].fillna("unknown")
    df = df[(df["age"] >= 0) & (df["age"] <= 120)]
    lo, hi = df["income"].quantile([0.01, 0.99])
    df["income"] = df["income"].clip(lo, hi)
    df["country"] = df["country"].str.strip().str.lower()
    out_df = pd.DataFrame({"id": df["id"], "churned": df["churned"]})
    out_df["age"] = (df["age"] - df["age"].mean()) / df["age"].std()
    out_df["income"] = np.log1p(df["income"])
    top = df["country"].value_counts().index[:8]
    for c in top:
        out_df[f"country__{c}"] = (df["country"] == c).astype("int32")
    out_df["country__unknown"] = (~df["country"].isin(top)).astype("int32")
    signup = pd.to_datetime(df["signup"])
    out_df["signup_year"] = signup.dt.year
    out_df["signup_month"] = signup.dt.month
    out_df["signup_dayofweek"] = (signup.dt.dayofweek + 1) % 7
    out_df.to_parquet(out)


def run_polars(src: str, out: str) -> None:
    """The same clean + features steps written in polars (lazy where statistics allow)."""
    import polars as pl

    df = pl.scan_parquet(src).unique(subset=["id"], keep="first", maintain_order=True)
    df = df.with_columns(
        pl.col("age").fill_null(pl.col("age").median()),
        pl.col("country").fill_null("unknown"),
    ).filter(pl.col("age").is_between(0, 120))
    inc = pl.col("income")
    df = df.with_columns(
        inc.clip(inc.quantile(0.01, "linear"), inc.quantile(0.99, "linear")),
        pl.col("country").str.strip_chars().str.to_lowercase(),
    ).collect()
    top = (
        df.group_by("country")
        .len()
        .sort(["len", "country"], descending=[True, False])
        .head(8)["country"]
        .to_list()
    )
    age = pl.col("age")
    df.select(
        "id",
        "churned",
        ((age - age.mean()) / age.std()).alias("age"),
        inc.log1p().alias("income"),
        *[(pl.col("country") == c).cast(pl.Int32).alias(f"country__{c}") for c in top],
        (~pl.col("country").is_in(top)).cast(pl.Int32).alias("country__unknown"),
        pl.col("signup").dt.year().alias("signup_year"),
        pl.col("signup").dt.month().alias("signup_month"),
        (pl.col("signup").dt.weekday() % 7).alias("signup_dayofweek"),
    ).write_parquet(out)


def run_sql(src: str, out: str) -> None:
    """The same steps as hand-written DuckDB SQL (statistics in pre-queries, one COPY)."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET enable_progress_bar_print=false")
    con.execute(f"CREATE VIEW src AS SELECT * FROM read_parquet('{src}')")
    dedup = (
        "SELECT * EXCLUDE (rn) FROM (SELECT *, row_number() OVER () AS rn FROM src) "
        "QUALIFY row_number() OVER (PARTITION BY id ORDER BY rn) = 1 ORDER BY rn"
    )
    (median,) = con.execute(f"SELECT median(age) FROM ({dedup})").fetchone()
    filled = (
        f"SELECT id, coalesce(age, {median}) AS age, income, "
        f"coalesce(country, 'unknown') AS country, signup, churned FROM ({dedup})"
    )
    kept = f"SELECT * FROM ({filled}) WHERE age BETWEEN 0 AND 120"
    lo, hi = con.execute(
        f"SELECT quantile_cont(income, 0.01), quantile_cont(income, 0.99) FROM ({kept})"
    ).fetchone()
    clean = (
        f"SELECT id, age, greatest(least(income, {hi}), {lo}) AS income, "
        f"lower(trim(country)) AS country, signup, churned FROM ({kept})"
    )
    con.execute(f"CREATE TEMP TABLE clean AS {clean}")
    mean, std = con.execute("SELECT avg(age), stddev_samp(age) FROM clean").fetchone()
    top = [
        r[0]
        for r in con.execute(
            "SELECT country FROM clean GROUP BY country ORDER BY count(*) DESC, country LIMIT 8"
        ).fetchall()
    ]
    onehot = ", ".join(f"(country = '{c}')::INTEGER AS \"country__{c}\"" for c in top)
    listed = ", ".join(f"'{c}'" for c in top)
    con.execute(f"""COPY (SELECT id, churned, (age - {mean}) / {std} AS age,
        ln(1 + income) AS income, {onehot},
        (country NOT IN ({listed}))::INTEGER AS country__unknown,
        year(signup) AS signup_year, month(signup) AS signup_month,
        dayofweek(signup) AS signup_dayofweek FROM clean) TO '{out}' (FORMAT parquet)""")


def run_aifab(src: str, out: str) -> None:
    """aifab: clean then fit features, each a new dataset version with lineage and profile."""
    from aifab.data import clean, fit_features
    from aifab.data.catalog import commit_query

    # The input version is set up before timing by the parent (same content -> same version).
    commit_query(
        "bench",
        f"SELECT * FROM read_parquet('{src}')",
        source=src,
        transform={"kind": "bench-input"},
    )
    t0 = time.perf_counter()
    cleaned = clean("bench", CLEAN)
    fit_features(cleaned.version.ref, FEATURES, output="bench.features")
    print(json.dumps({"inner_s": time.perf_counter() - t0}))


def _child(kind: str, src: str, out: str, home: str) -> dict[str, float]:
    """Run one contender in a fresh process; wait4 gives that process's own peak RSS."""
    code = (
        f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        f"import data_clean as b, time, json; t=time.perf_counter(); "
        f"b.run_{kind}({src!r}, {out!r}); "
        f"print(json.dumps({{'wall_s': time.perf_counter()-t}}))"
    )
    env = {**os.environ, "AIFAB_HOME": home, "AIFAB_DUCKDB_THREADS": str(os.cpu_count() or 2)}
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=out_f, stderr=err_f, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out_f.seek(0)
        err_f.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{kind} failed:\n{err_f.read()[-3000:]}")
        # Progress bars may share a line with the JSON (carriage returns): take from the "{".
        lines = [json.loads(x[x.index("{") :]) for x in out_f.read().splitlines() if "{" in x]
    result = {k: v for d in lines for k, v in d.items()}
    result["peak_rss_mb"] = usage.ru_maxrss / 1024
    return result


def main() -> None:
    """Run the three contenders and print a table with the ratios."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=5_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "input.parquet"
        make_input(src, args.rows)
        print(f"input: {args.rows:,} rows, {src.stat().st_size / 1e6:.1f} MB parquet")
        results = {}
        for kind in ("sql", "aifab", "polars", "pandas"):
            runs = [
                _child(
                    kind,
                    str(src),
                    str(Path(tmp) / f"{kind}-{i}.parquet"),
                    str(Path(tmp) / f"ws-{kind}"),
                )
                for i in range(args.repeats + 1)
            ][1:]  # the first run is the warm-up
            key = "inner_s" if kind == "aifab" else "wall_s"
            results[kind] = {
                "median_s": statistics.median(r[key] for r in runs),
                "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            }
    sql, aifab, pandas = results["sql"], results["aifab"], results["pandas"]
    polars = results["polars"]
    print(f"{'contender':<10}{'median s':>10}{'peak RSS MB':>14}")
    for kind, r in results.items():
        print(f"{kind:<10}{r['median_s']:>10.2f}{r['peak_rss_mb']:>14.0f}")
    print(f"aifab vs pandas: {pandas['median_s'] / aifab['median_s']:.2f}x faster (goal >= 2x)")
    print(f"aifab vs polars: {polars['median_s'] / aifab['median_s']:.2f}x faster (goal >= 1x)")
    print(f"aifab vs hand SQL: {aifab['median_s'] / sql['median_s']:.2f}x the time (goal <= 1.2x)")


if __name__ == "__main__":
    main()
