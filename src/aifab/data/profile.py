"""Column profiles of a dataset version: the baseline that drift detection compares against.

Columns are profiled in batches of :data:`BATCH_COLUMNS` (one aggregate query, then one
histogram query per batch, and one grouping query per batch of string columns for their top
values), so cost grows linearly with the number of columns and memory stays bounded: a single
aggregate over every column of a 1,000-column table needed over 16 GB.
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
#: ... and up to this many cells (rows x columns): exact counts cost a hash table per column.
EXACT_DISTINCT_MAX_CELLS = 5_000_000
#: Columns per aggregate query; each distinct count holds its own hash table.
BATCH_COLUMNS = 50
#: Tables with more columns than a batch and at most this many cells are profiled "long": the
#: columns of each type unpivoted into (name, value) rows, so that a fixed set of grouped
#: aggregates serves every column. DuckDB's cost per query grows with the table's width and
#: with the expressions in it, so batches cost quadratic time on 20,000-column files.
LONG_MAX_CELLS = 5_000_000
_LONG_KINDS = frozenset({"numeric", "string", "temporal", "boolean"})

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


def _column_exprs(j: int, kind: str, exact: bool) -> list[str]:
    """Aggregates of the batch's ``j``-th column over the projection of :func:`_projection`."""
    c, d, f = f"__c{j}", f"__d{j}", f"__f{j}"
    distinct = f"count(DISTINCT {c})" if exact else f"approx_count_distinct({c})"
    exprs = [f"count({c})", distinct if kind != "other" else "NULL"]
    if kind == "numeric":
        qs = ", ".join(str(q) for q in QUANTILES)
        exprs += [
            f"count_if(isnan({d}))",
            f"count_if({d} = 'inf'::DOUBLE)",
            f"count_if({d} = '-inf'::DOUBLE)",
            f"min({f})",
            f"max({f})",
            f"avg({f})",
            f"stddev_samp({f})",
            f"approx_quantile({f}, [{qs}])",
        ]
    elif kind == "string":
        exprs += [f"avg(length({c}))", f"max(length({c}))"]
    elif kind == "temporal":
        exprs += [f"min({c})", f"max({c})"]
    return exprs


def _projection(rel: str, batch: Sequence[tuple[str, str, str]], keep: str = "") -> str:
    """The batch's columns as ``__c<j>``, numeric ones also as ``__d<j>`` and ``__f<j>``.

    ``__d<j>`` is the value as DOUBLE, ``__f<j>`` the same with NaN/inf turned to NULL.
    Aggregates then skip non-finite values as nulls: ``FILTER (WHERE isfinite(x))`` on every
    aggregate cost five times as much. ``keep`` names a column passed through as it is.
    """
    inner, outer = [keep] if keep else [], ["*"]
    for j, (name, _, kind) in enumerate(batch):
        inner.append(f"{sql_ident(name)} AS __c{j}")
        if kind == "numeric":
            inner.append(f"CAST({sql_ident(name)} AS DOUBLE) AS __d{j}")
            outer.append(f"CASE WHEN isfinite(__d{j}) THEN __d{j} END AS __f{j}")
    return f"(SELECT {', '.join(outer)} FROM (SELECT {', '.join(inner)} FROM {rel}))"


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


def _edges(lo: float, hi: float, width: float) -> list[float]:
    """Bin edges; interpolated, not ``lo + i * width``, so none overflows on a +-1.7e308 range."""
    steps = range(HISTOGRAM_BINS + 1)
    if hi == lo:
        return [lo + i * width for i in steps]
    return [lo * (1 - i / HISTOGRAM_BINS) + hi * (i / HISTOGRAM_BINS) for i in steps]


def _histograms(
    con: duckdb.DuckDBPyConnection, projected: str, cols: list[tuple[int, dict[str, Any]]]
) -> None:
    """Equal-width histograms of a batch's numeric columns (finite values) in one pass.

    Each column's bin numbers are unpivoted and counted in one GROUP BY (twice as fast as a
    ``histogram()`` aggregate per column). Values are halved before subtracting so that
    ``x - lo`` cannot overflow to inf when a column spans most of the DOUBLE range; non-finite
    values are NULL in ``__f<j>`` and UNPIVOT drops them.
    """
    numeric = [(j, c) for j, c in cols if c["kind"] == "numeric" and c.get("min") is not None]
    if not numeric:
        return
    exprs = []
    for j, col in numeric:
        lo, hi = float(col["min"]), float(col["max"])
        width = hi / HISTOGRAM_BINS - lo / HISTOGRAM_BINS or 1.0  # finite even for +-1.7e308
        col["histogram"] = {
            "edges": _edges(lo, hi, width),
            "counts": [0] * HISTOGRAM_BINS,
        }
        scaled = f"(__f{j} / 2.0 - {lo / 2!r}) / {width / 2!r}"
        # greatest/least skip NULLs, so a non-finite value must not reach them.
        exprs.append(
            f"CASE WHEN __f{j} IS NOT NULL THEN greatest(0, least("
            f"{HISTOGRAM_BINS - 1}, CAST(floor({scaled}) AS INTEGER))) END AS __h{j}"
        )
    on = ", ".join(f"__h{j}" for j, _ in numeric)
    rows = con.execute(
        f"SELECT name, bin, count(*) FROM (UNPIVOT (SELECT {', '.join(exprs)} FROM {projected}) "
        f"ON {on} INTO NAME name VALUE bin) GROUP BY ALL"
    ).fetchall()
    by_name = {f"__h{j}": col for j, col in numeric}
    for name, b, n in rows:
        by_name[name]["histogram"]["counts"][int(b)] = int(n)


def _top_values(con: duckdb.DuckDBPyConnection, rel: str, col: str) -> list[list[Any]]:
    c = sql_ident(col)
    rows = con.execute(
        f"SELECT {c}, count(*) AS n FROM {rel} WHERE {c} IS NOT NULL "
        f"GROUP BY ALL ORDER BY n DESC, {c} LIMIT {TOP_K}"
    ).fetchall()
    return [[_clean(v), int(n)] for v, n in rows]


def _top_strings(
    con: duckdb.DuckDBPyConnection, rel: str, names: Sequence[str]
) -> dict[str, list[list[Any]]]:
    """Top values of several VARCHAR columns in one grouping pass (UNPIVOT drops nulls)."""
    cols = ", ".join(sql_ident(n) for n in names)
    rows = con.execute(
        f"SELECT name, value, n FROM (SELECT name, value, count(*) AS n, row_number() OVER "
        f"(PARTITION BY name ORDER BY count(*) DESC, value) AS rk FROM (UNPIVOT "
        f"(SELECT {cols} FROM {rel}) ON {cols} INTO NAME name VALUE value) GROUP BY name, value) "
        f"WHERE rk <= {TOP_K} ORDER BY name, rk"
    ).fetchall()
    top: dict[str, list[list[Any]]] = {n: [] for n in names}
    for name, value, n in rows:
        top[name].append([_clean(value), int(n)])
    return top


def _add_top_values(
    con: duckdb.DuckDBPyConnection, rel: str, columns: dict[str, Any], step: int = BATCH_COLUMNS
) -> None:
    """Top values of string (``step`` at a time) and boolean (per column) columns not all null."""
    wanted = [n for n, c in columns.items() if c["null_share"] < 1]
    strings = [n for n in wanted if columns[n]["kind"] == "string"]
    for start in range(0, len(strings), step):
        for name, top in _top_strings(con, rel, strings[start : start + step]).items():
            columns[name]["top_values"] = top
    for name in wanted:
        if columns[name]["kind"] == "boolean":
            columns[name]["top_values"] = _top_values(con, rel, name)


def _profile_batch(
    con: duckdb.DuckDBPyConnection,
    rel: str,
    batch: Sequence[tuple[str, str, str]],
    n: int,
    exact: bool,
) -> dict[str, Any]:
    """Statistics and histograms of one batch of ``(name, type, kind)`` columns."""
    projected = _projection(rel, batch)
    plan = [_column_exprs(j, kind, exact) for j, (_, _, kind) in enumerate(batch)]
    row = con.execute(f"SELECT {', '.join(e for ex in plan for e in ex)} FROM {projected}")
    values_all = row.fetchall()[0]
    columns: list[tuple[int, dict[str, Any]]] = []
    i = 0
    for j, ((_, col_type, kind), exprs) in enumerate(zip(batch, plan, strict=True)):
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
        columns.append((j, col))
    _histograms(con, projected, columns)
    return {batch[j][0]: col for j, col in columns}


def _long_stats(
    con: duckdb.DuckDBPyConnection, rel: str, names: list[str], col_type: str, n: int, exact: bool
) -> dict[str, dict[str, Any]]:
    """Statistics and histograms of the ``col_type`` columns ``names``, grouped by name."""
    kind = kind_of(col_type)
    cols = ", ".join(sql_ident(c) for c in names)
    long = f"(UNPIVOT (SELECT {cols} FROM {rel}) ON {cols} INTO NAME name VALUE value)"
    projected = _projection(long, [("value", col_type, kind)], keep="name")
    exprs = _column_exprs(0, kind, exact)
    got = con.execute(f"SELECT name, {', '.join(exprs)} FROM {projected} GROUP BY name")
    out: dict[str, dict[str, Any]] = {}
    for name, *values in got.fetchall():
        col: dict[str, Any] = {
            "type": col_type,
            "kind": kind,
            "null_share": (1 - values[0] / n) if n else 0.0,
            "distinct": int(values[1]) if values[1] is not None else None,
        }
        col.update(_stats(kind, values[2:]))
        out[str(name)] = col
    for name in names:  # UNPIVOT drops nulls: an all-null column has no group
        out.setdefault(
            name, {"type": col_type, "kind": kind, "null_share": 1.0 if n else 0.0, "distinct": 0}
        )
    if kind == "numeric":
        _long_histograms(con, projected, out)
    return out


def _long_histograms(
    con: duckdb.DuckDBPyConnection, projected: str, columns: dict[str, dict[str, Any]]
) -> None:
    """:func:`_histograms` over the long projection, each name binned by its own range."""
    ranges = {n: c for n, c in columns.items() if c.get("min") is not None}
    if not ranges:
        return
    bounds = []
    for name, col in ranges.items():
        lo, hi = float(col["min"]), float(col["max"])
        width = hi / HISTOGRAM_BINS - lo / HISTOGRAM_BINS or 1.0
        col["histogram"] = {"edges": _edges(lo, hi, width), "counts": [0] * HISTOGRAM_BINS}
        bounds.append((name, lo / 2, width / 2))
    import pyarrow as pa

    # An Arrow table, not INSERTs: executemany adds rows one by one (8 s for 5,000 columns).
    names, los, widths = zip(*bounds, strict=True)
    table = pa.table({"name": list(names), "lo": list(los), "w": list(widths)})
    con.register("__aifab_bounds", table)
    try:
        rows = con.execute(
            f"SELECT p.name, greatest(0, least({HISTOGRAM_BINS - 1}, CAST(floor((__f0 / 2.0 - "
            f"b.lo) / b.w) AS INTEGER))) AS bin, count(*) FROM {projected} p JOIN "
            "__aifab_bounds b USING (name) WHERE __f0 IS NOT NULL GROUP BY ALL"
        ).fetchall()
    finally:
        con.unregister("__aifab_bounds")
    for name, b, count in rows:
        ranges[str(name)]["histogram"]["counts"][int(b)] = int(count)


def _profile_long(
    con: duckdb.DuckDBPyConnection, rel: str, schema: list[tuple[str, str, str]], n: int
) -> dict[str, Any]:
    """Profiles of a wide, short table: one grouped query per column type (linear in columns)."""
    by_type: dict[str, list[str]] = {}
    for name, col_type, kind in schema:
        if kind in _LONG_KINDS:
            by_type.setdefault(col_type, []).append(name)
    columns: dict[str, Any] = {}
    for col_type, names in by_type.items():
        columns.update(_long_stats(con, rel, names, col_type, n, exact=True))
    rest = [c for c in schema if c[0] not in columns]
    for start in range(0, len(rest), BATCH_COLUMNS):
        columns.update(_profile_batch(con, rel, rest[start : start + BATCH_COLUMNS], n, True))
    return {name: columns[name] for name, _, _ in schema}


def profile_relation(con: duckdb.DuckDBPyConnection, rel: str) -> dict[str, Any]:
    """Profile every column of the table expression ``rel``.

    Columns go in batches of :data:`BATCH_COLUMNS`: one pass per batch computes counts,
    distinct counts and per-kind statistics, a second the numeric histograms, a third the top
    values of its string columns (boolean columns are grouped one by one).

    Returns:
        ``{"num_rows": N, "columns": {name: {"type", "kind", "null_share", "distinct", ...}}}``
        with min/max/mean/std/quantiles/histogram over the finite values of numeric columns
        (``nan_count``, ``posinf_count`` and ``neginf_count`` count the others) and top values
        for string and boolean columns; a BLOB column of images adds ``images`` (sizes, modes and
        formats of a sample). Distinct counts are exact up to 100,000 rows and
        5,000,000 cells, HyperLogLog estimates beyond.
    """
    schema = [
        (n, t, kind_of(t)) for n, t, *_ in con.execute(f"DESCRIBE SELECT * FROM {rel}").fetchall()
    ]
    n = int(con.execute(f"SELECT count(*) FROM {rel}").fetchall()[0][0])
    # Exact distinct counts while cheap, HyperLogLog estimates beyond.
    exact = n <= EXACT_DISTINCT_MAX_ROWS and n * len(schema) <= EXACT_DISTINCT_MAX_CELLS
    columns: dict[str, Any] = {}
    long = len(schema) > BATCH_COLUMNS and n * len(schema) <= LONG_MAX_CELLS
    if long:
        columns = _profile_long(con, rel, schema, n)
    else:
        for start in range(0, len(schema), BATCH_COLUMNS):
            batch = schema[start : start + BATCH_COLUMNS]
            columns.update(_profile_batch(con, rel, batch, n, exact))
    _add_top_values(con, rel, columns, max(len(schema), 1) if long else BATCH_COLUMNS)
    for name, col in columns.items():
        if col["type"].upper() == "BLOB" and col["null_share"] < 1:
            from aifab.data.profile_images import image_summary

            if (images := image_summary(con, rel, name)) is not None:
                col["images"] = images
    return {"num_rows": n, "columns": columns}
