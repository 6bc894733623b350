"""Column profiles of a dataset version: the baseline that drift detection compares against.

Columns are profiled in batches of :data:`BATCH_COLUMNS` (one aggregate query, then one
histogram query per batch), so cost grows linearly with the number of columns and memory stays
bounded: a single aggregate over every column of a 1,000-column table needed over 16 GB.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import duckdb

from aifab.data.lake import sql_ident

QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
HISTOGRAM_BINS = 20
TOP_K = 10
EXACT_DISTINCT_MAX_ROWS = 100_000
#: Columns per aggregate query; each distinct count holds its own hash table.
BATCH_COLUMNS = 50

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


def _as_double(name: str) -> str:
    return f"CAST({sql_ident(name)} AS DOUBLE)"


def _column_exprs(name: str, kind: str, exact: bool) -> list[str]:
    """Aggregates of one column for its batch's statistics pass."""
    c = sql_ident(name)
    distinct = f"count(DISTINCT {c})" if exact else f"approx_count_distinct({c})"
    exprs = [f"count({c})", distinct if kind != "other" else "NULL"]
    if kind == "numeric":
        x = _as_double(name)
        fin = f"FILTER (WHERE isfinite({x}))"
        qs = ", ".join(str(q) for q in QUANTILES)
        exprs += [
            f"count_if(isnan({x}))",
            f"count_if({x} = 'inf'::DOUBLE)",
            f"count_if({x} = '-inf'::DOUBLE)",
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
        nan, posinf, neginf, lo, hi, mean, std, quants = values
        return {
            "nan_count": int(nan),
            "posinf_count": int(posinf),
            "neginf_count": int(neginf),
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


def _bin_expr(name: str, lo: float, width: float) -> str:
    """The histogram bin of a value; non-finite values get NULL (never cast to an integer).

    Values are halved before subtracting so that ``x - lo`` cannot overflow to inf when the
    column spans most of the DOUBLE range.
    """
    x = _as_double(name)
    scaled = f"({x} / 2.0 - {lo / 2!r}) / {width / 2!r}"
    return (
        f"histogram(CASE WHEN isfinite({x}) THEN greatest(0, least({HISTOGRAM_BINS - 1}, "
        f"CAST(floor({scaled}) AS INTEGER))) END)"
    )


def _histograms(con: duckdb.DuckDBPyConnection, rel: str, cols: dict[str, Any]) -> None:
    """Equal-width histograms of a batch's numeric columns (finite values) in one pass."""
    numeric = [
        (n, c) for n, c in cols.items() if c["kind"] == "numeric" and c.get("min") is not None
    ]
    if not numeric:
        return
    exprs = []
    for name, col in numeric:
        lo, hi = float(col["min"]), float(col["max"])
        width = hi / HISTOGRAM_BINS - lo / HISTOGRAM_BINS or 1.0  # finite even for +-1.7e308
        col["histogram"] = {"edges": [lo + i * width for i in range(HISTOGRAM_BINS + 1)]}
        exprs.append(_bin_expr(name, lo, width))
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


def _profile_batch(
    con: duckdb.DuckDBPyConnection,
    rel: str,
    batch: Sequence[tuple[str, str, str]],
    n: int,
) -> dict[str, Any]:
    """Statistics and histograms of one batch of ``(name, type, kind)`` columns."""
    exact = n <= EXACT_DISTINCT_MAX_ROWS  # exact distinct counts while cheap, HLL beyond
    plan = [(name, t, kind, _column_exprs(name, kind, exact)) for name, t, kind in batch]
    row = con.execute(f"SELECT {', '.join(e for *_, ex in plan for e in ex)} FROM {rel}").fetchall()
    values_all = row[0]
    columns: dict[str, Any] = {}
    i = 0
    for name, col_type, kind, exprs in plan:
        values = list(values_all[i : i + len(exprs)])
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
    return columns


def profile_relation(con: duckdb.DuckDBPyConnection, rel: str) -> dict[str, Any]:
    """Profile every column of the table expression ``rel``.

    Columns go in batches of :data:`BATCH_COLUMNS`: one pass per batch computes counts,
    distinct counts and per-kind statistics, a second the numeric histograms; top values are
    grouped per string or boolean column.

    Returns:
        ``{"num_rows": N, "columns": {name: {"type", "kind", "null_share", "distinct", ...}}}``
        with min/max/mean/std/quantiles/histogram over the finite values of numeric columns
        (``nan_count``, ``posinf_count`` and ``neginf_count`` count the others) and top values
        for string and boolean columns. Distinct counts are exact up to 100,000 rows,
        HyperLogLog estimates beyond.
    """
    schema = [
        (n, t, kind_of(t)) for n, t, *_ in con.execute(f"DESCRIBE SELECT * FROM {rel}").fetchall()
    ]
    n = int(con.execute(f"SELECT count(*) FROM {rel}").fetchall()[0][0])
    columns: dict[str, Any] = {}
    for start in range(0, len(schema), BATCH_COLUMNS):
        columns.update(_profile_batch(con, rel, schema[start : start + BATCH_COLUMNS], n))
    # One grouping pass per string/boolean column; numeric columns have their histogram.
    for name, col in columns.items():
        if col["kind"] in ("string", "boolean") and col["null_share"] < 1:
            col["top_values"] = _top_values(con, rel, name)
    return {"num_rows": n, "columns": columns}
