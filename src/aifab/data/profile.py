"""Column profiles of a dataset version: the baseline that drift detection compares against."""

from __future__ import annotations

import math
from typing import Any

import duckdb

from aifab.data.lake import sql_ident

QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
HISTOGRAM_BINS = 20
TOP_K = 10
EXACT_DISTINCT_MAX_ROWS = 1_000_000

_NUMERIC = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
    "FLOAT",
    "DOUBLE",
    "REAL",
)
_TEMPORAL = (
    "DATE",
    "TIMESTAMP",
    "TIME",
    "TIMESTAMP WITH TIME ZONE",
    "TIMESTAMP_NS",
    "TIMESTAMP_MS",
    "TIMESTAMP_S",
)


def kind_of(col_type: str) -> str:
    """Classify a DuckDB type as numeric, string, boolean, temporal or other."""
    t = col_type.upper()
    if t in _NUMERIC or t.startswith("DECIMAL"):
        return "numeric"
    if t == "VARCHAR":
        return "string"
    if t == "BOOLEAN":
        return "boolean"
    if t in _TEMPORAL or t.startswith("TIMESTAMP"):
        return "temporal"
    return "other"


def _clean(value: Any) -> Any:
    """Make a value JSON-safe (NaN/inf -> None, dates -> ISO strings)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    return str(value)


def _numeric_stats(con: duckdb.DuckDBPyConnection, rel: str, col: str) -> dict[str, Any]:
    c = sql_ident(col)
    x = f"CAST({c} AS DOUBLE)"
    qs = ", ".join(str(q) for q in QUANTILES)
    row = con.execute(
        f"SELECT min({x}), max({x}), avg({x}), stddev_samp({x}), "
        f"approx_quantile({x}, [{qs}]) FROM {rel} WHERE isfinite({x})"
    ).fetchone()
    assert row is not None
    lo, hi, mean, std, quants = row
    stats: dict[str, Any] = {
        "min": _clean(lo),
        "max": _clean(hi),
        "mean": _clean(mean),
        "std": _clean(std),
        "quantiles": {str(q): _clean(v) for q, v in zip(QUANTILES, quants or [], strict=False)},
    }
    if lo is not None and hi is not None:
        width = (hi - lo) / HISTOGRAM_BINS or 1.0
        counts = dict(
            con.execute(
                f"SELECT least(CAST(floor(({x} - {lo!r}) / {width!r}) AS INTEGER), "
                f"{HISTOGRAM_BINS - 1}) AS b, count(*) FROM {rel} WHERE isfinite({x}) GROUP BY b"
            ).fetchall()
        )
        stats["histogram"] = {
            "edges": [lo + i * width for i in range(HISTOGRAM_BINS + 1)],
            "counts": [int(counts.get(i, 0)) for i in range(HISTOGRAM_BINS)],
        }
    return stats


def _top_values(con: duckdb.DuckDBPyConnection, rel: str, col: str) -> list[list[Any]]:
    c = sql_ident(col)
    rows = con.execute(
        f"SELECT {c}, count(*) AS n FROM {rel} WHERE {c} IS NOT NULL "
        f"GROUP BY {c} ORDER BY n DESC, {c} LIMIT {TOP_K}"
    ).fetchall()
    return [[_clean(v), int(n)] for v, n in rows]


def profile_relation(con: duckdb.DuckDBPyConnection, rel: str) -> dict[str, Any]:
    """Profile every column of the table expression ``rel``.

    Returns:
        ``{"num_rows": N, "columns": {name: {"type", "kind", "null_share", "distinct", ...}}}``
        with min/max/mean/std/quantiles/histogram for numeric columns and top values for
        string, boolean and low-cardinality columns.
    """
    schema = con.execute(f"DESCRIBE SELECT * FROM {rel}").fetchall()
    count_row = con.execute(f"SELECT count(*) FROM {rel}").fetchone()
    n = int(count_row[0]) if count_row else 0
    columns: dict[str, Any] = {}
    if not schema:
        return {"num_rows": n, "columns": columns}
    # Exact distinct counts while they are cheap; HyperLogLog beyond that.
    distinct = "count(DISTINCT {})" if n <= EXACT_DISTINCT_MAX_ROWS else "approx_count_distinct({})"
    aggs = ", ".join(
        f"count({sql_ident(name)}), " + distinct.format(sql_ident(name))
        if kind_of(t) != "other"
        else f"count({sql_ident(name)}), NULL"
        for name, t, *_ in schema
    )
    counts = con.execute(f"SELECT {aggs} FROM {rel}").fetchone() or ()
    for i, (name, col_type, *_) in enumerate(schema):
        non_null, distinct = counts[2 * i], counts[2 * i + 1]
        kind = kind_of(col_type)
        col: dict[str, Any] = {
            "type": col_type,
            "kind": kind,
            "null_share": (1 - non_null / n) if n else 0.0,
            "distinct": int(distinct) if distinct is not None else None,
        }
        if n and non_null:
            if kind == "numeric":
                col.update(_numeric_stats(con, rel, name))
            if kind in ("string", "boolean") or (kind == "numeric" and (distinct or 0) <= TOP_K):
                col["top_values"] = _top_values(con, rel, name)
            if kind == "string":
                lens = con.execute(
                    f"SELECT avg(length({sql_ident(name)})), max(length({sql_ident(name)})) "
                    f"FROM {rel}"
                ).fetchone()
                col["mean_length"], col["max_length"] = (_clean(v) for v in (lens or (None, None)))
            if kind == "temporal":
                lo_hi = con.execute(
                    f"SELECT min({sql_ident(name)}), max({sql_ident(name)}) FROM {rel}"
                ).fetchone()
                col["min"], col["max"] = (_clean(v) for v in (lo_hi or (None, None)))
        columns[name] = col
    return {"num_rows": n, "columns": columns}
