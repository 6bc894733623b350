"""Column profiles of a dataset version: the baseline that drift detection compares against."""

from __future__ import annotations

import math
from typing import Any

import duckdb

from aifab.data.lake import sql_ident

QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
HISTOGRAM_BINS = 20
TOP_K = 10
EXACT_DISTINCT_MAX_ROWS = 100_000

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


def _column_exprs(name: str, kind: str, exact: bool) -> list[str]:
    """Aggregates of one column for the single statistics pass."""
    c = sql_ident(name)
    distinct = f"count(DISTINCT {c})" if exact else f"approx_count_distinct({c})"
    exprs = [f"count({c})", distinct if kind != "other" else "NULL"]
    if kind == "numeric":
        x = f"CAST({c} AS DOUBLE)"
        fin = f"FILTER (WHERE isfinite({x}))"
        qs = ", ".join(str(q) for q in QUANTILES)
        exprs += [
            # NaN and ±inf are counted, and left out of every statistic below.
            f"count(*) FILTER (WHERE isnan({x}))",
            f"count(*) FILTER (WHERE isinf({x}))",
            f"min({x}) {fin}",
            f"max({x}) {fin}",
            f"avg({x}) {fin}",
            f"stddev_samp({x}) {fin}",
            f"approx_quantile({x}, [{qs}]) {fin}",
        ]
    elif kind == "string":
        exprs += [f"avg(length({c}))", f"max(length({c}))"]
    elif kind == "temporal":
        exprs += [f"min({c})", f"max({c})"]
    return exprs


def _stats(kind: str, values: list[Any]) -> dict[str, Any]:
    if kind == "numeric":
        nan, inf, lo, hi, mean, std, quants = values
        return {
            "nan": int(nan),
            "inf": int(inf),
            "min": _clean(lo),
            "max": _clean(hi),
            "mean": _clean(mean),
            "std": _clean(std),
            "quantiles": {str(q): _clean(v) for q, v in zip(QUANTILES, quants or [], strict=False)},
        }
    if kind == "string":
        return {"mean_length": _clean(values[0]), "max_length": _clean(values[1])}
    if kind == "temporal":
        return {"min": _clean(values[0]), "max": _clean(values[1])}
    return {}


def _histograms(con: duckdb.DuckDBPyConnection, rel: str, cols: dict[str, Any]) -> None:
    """Equal-width histograms of every numeric column in one more pass."""
    numeric = [
        (n, c) for n, c in cols.items() if c["kind"] == "numeric" and c.get("min") is not None
    ]
    if not numeric:
        return
    exprs = []
    for name, col in numeric:
        x = f"CAST({sql_ident(name)} AS DOUBLE)"
        # Dividing first keeps the width finite when max - min overflows a DOUBLE.
        lo, hi = col["min"], col["max"]
        width = hi / HISTOGRAM_BINS - lo / HISTOGRAM_BINS or 1.0
        steps = range(HISTOGRAM_BINS + 1)
        # Interpolated, not lo + i * width, so no edge overflows to inf either.
        edges = (
            [lo + i * width for i in steps]
            if hi == lo
            else [lo * (1 - i / HISTOGRAM_BINS) + hi * (i / HISTOGRAM_BINS) for i in steps]
        )
        col["histogram"] = {"edges": edges}
        # CASE, not FILTER: the bin expression is evaluated before FILTER drops a row, and
        # casting a NaN bin to INTEGER fails; a NULL bin is simply not counted.
        exprs.append(
            f"histogram(CASE WHEN isfinite({x}) THEN least(CAST(floor(({x} / {width!r}) - "
            f"({lo!r} / {width!r})) AS INTEGER), {HISTOGRAM_BINS - 1}) END)"
        )
    row = con.execute(f"SELECT {', '.join(exprs)} FROM {rel}").fetchall()[0]
    for (_, col), counts in zip(numeric, row, strict=True):
        counts = counts or {}
        col["histogram"]["counts"] = [int(counts.get(i, 0)) for i in range(HISTOGRAM_BINS)]


def _top_values(con: duckdb.DuckDBPyConnection, rel: str, col: str) -> list[list[Any]]:
    c = sql_ident(col)
    rows = con.execute(
        f"SELECT {c}, count(*) AS n FROM {rel} WHERE {c} IS NOT NULL "
        f"GROUP BY ALL ORDER BY n DESC, {c} LIMIT {TOP_K}"
    ).fetchall()
    return [[_clean(v), int(n)] for v, n in rows]


def profile_relation(con: duckdb.DuckDBPyConnection, rel: str) -> dict[str, Any]:
    """Profile every column of the table expression ``rel``.

    One pass computes counts, distinct counts and per-kind statistics for all columns, a second
    the numeric histograms; top values are grouped per string or boolean column.

    Returns:
        ``{"num_rows": N, "columns": {name: {"type", "kind", "null_share", "distinct", ...}}}``
        with min/max/mean/std/quantiles/histogram for numeric columns and top values for
        string and boolean columns. Distinct counts are exact up to 100,000 rows, HyperLogLog
        estimates beyond.
    """
    schema = [
        (n, t, kind_of(t)) for n, t, *_ in con.execute(f"DESCRIBE SELECT * FROM {rel}").fetchall()
    ]
    n = int(con.execute(f"SELECT count(*) FROM {rel}").fetchall()[0][0])
    exact = n <= EXACT_DISTINCT_MAX_ROWS  # exact distinct counts while cheap, HLL beyond
    plan = [(name, t, kind, _column_exprs(name, kind, exact)) for name, t, kind in schema]
    columns: dict[str, Any] = {}
    if not plan:
        return {"num_rows": n, "columns": columns}
    aggregates = ", ".join(e for *_, ex in plan for e in ex)
    row = con.execute(f"SELECT {aggregates} FROM {rel}").fetchall()[0]
    i = 0
    for name, col_type, kind, exprs in plan:
        values = list(row[i : i + len(exprs)])
        i += len(exprs)
        non_null, distinct = values[0], values[1]
        col: dict[str, Any] = {
            "type": col_type,
            "kind": kind,
            "null_share": (1 - non_null / n) if n else 0.0,
            "distinct": int(distinct) if distinct is not None else None,
        }
        if non_null:
            col.update(_stats(kind, values[2:]))
        columns[name] = col
    _histograms(con, rel, columns)
    # One grouping pass per string/boolean column; numeric columns have their histogram.
    for name, col in columns.items():
        if col["kind"] in ("string", "boolean") and col["null_share"] < 1:
            col["top_values"] = _top_values(con, rel, name)
    return {"num_rows": n, "columns": columns}
