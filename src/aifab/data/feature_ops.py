"""Fitting feature parameters on training rows, and compiling them into one DuckDB projection.

Fitting reads the training rows at most three times: one aggregate query for every mean, std,
min and max, one GROUPING SETS query for every feature's top categories, and the texts of
TF-IDF features. :func:`projection_sql` turns the fitted parameters into the single SELECT that
both builds the features dataset and transforms new rows, so training and serving agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb

from aifab.core.errors import InvalidInputError
from aifab.data.feature_spec import (
    Bucketize,
    Categorical,
    DateParts,
    Feature,
    FeatureSpec,
    Hash,
    Log1p,
    MinMax,
    OneHot,
    Standardize,
    TfIdf,
    output_name,
)
from aifab.data.feature_text import fit_tfidf
from aifab.data.lake import sql_ident, sql_string
from aifab.data.profile import kind_of

#: Column kinds (see :func:`aifab.data.profile.kind_of`) each transform accepts.
_KINDS: dict[type, tuple[str, ...]] = {
    Standardize: ("numeric", "boolean"),
    MinMax: ("numeric", "boolean"),
    Log1p: ("numeric", "boolean"),
    Bucketize: ("numeric", "boolean"),
    DateParts: ("temporal",),
    TfIdf: ("string",),
}
_DATE_PARTS = {"year": "year", "month": "month", "day": "day", "dayofweek": "dow", "hour": "hour"}


def describe(feature: Feature, index: int) -> str:
    """How errors name a feature: ``feature 2 'amount' (log1p)``."""
    return f"feature {index} {output_name(feature)!r} ({feature.transform})"


def check_columns(spec: FeatureSpec, types: dict[str, str]) -> None:
    """Every feature's column exists and has a type its transform accepts."""
    for i, f in enumerate(spec.features):
        if f.column not in types:
            raise InvalidInputError(
                f"{describe(f, i)}: column {f.column!r} not found (columns: {', '.join(types)})"
            )
        kinds = _KINDS.get(type(f))
        if kinds and kind_of(types[f.column]) not in kinds:
            raise InvalidInputError(
                f"{describe(f, i)}: column {f.column!r} has type {types[f.column]}, "
                f"but {f.transform} needs a {' or '.join(kinds)} column"
            )


def _num(column: str) -> str:
    return f"CAST({sql_ident(column)} AS DOUBLE)"


def _lit(x: float) -> str:
    """A DOUBLE literal that round-trips exactly (a bare 0.1 would parse as DECIMAL)."""
    return f"'{float(x)!r}'::DOUBLE"


def _stats_query(spec: FeatureSpec, rel: str, where: str) -> tuple[str, list[tuple[int, str]]]:
    aggs = ["count(*)"]
    slots: list[tuple[int, str]] = []
    for i, f in enumerate(spec.features):
        x = _num(f.column)
        finite = f"FILTER (WHERE isfinite({x}))"
        pairs = {
            Standardize: (("mean", "avg"), ("std", "stddev_pop")),
            MinMax: (("min", "min"), ("max", "max")),
        }.get(type(f), ())
        for key, fn in pairs:
            aggs.append(f"{fn}({x}) {finite}")
            slots.append((i, key))
    return f"SELECT {', '.join(aggs)} FROM {rel}{where}", slots


def _top_categories(
    con: duckdb.DuckDBPyConnection, spec: FeatureSpec, rel: str, where: str
) -> dict[int, list[str]]:
    """The most frequent non-NULL values (as text) per onehot/categorical feature, in one scan.

    Ties are broken by value so the choice is deterministic.
    """
    cats = [(i, f) for i, f in enumerate(spec.features) if isinstance(f, OneHot | Categorical)]
    if not cats:
        return {}
    cols = ", ".join(f"CAST({sql_ident(f.column)} AS VARCHAR) AS c{i}" for i, f in cats)
    which = " ".join(f"WHEN GROUPING(c{i}) = 0 THEN {i}" for i, _ in cats)
    value = "coalesce(" + ", ".join(f"c{i}" for i, _ in cats) + ")"
    sets = ", ".join(f"(c{i})" for i, _ in cats)
    limit = " ".join(f"WHEN {i} THEN {f.max_categories}" for i, f in cats)
    rows = con.execute(
        f"SELECT f, v FROM (SELECT f, v, row_number() OVER (PARTITION BY f ORDER BY n DESC, v) "
        f"AS r FROM (SELECT CASE {which} END AS f, {value} AS v, count(*) AS n "
        f"FROM (SELECT {cols} FROM {rel}{where}) GROUP BY GROUPING SETS ({sets})) "
        f"WHERE v IS NOT NULL) WHERE r <= CASE f {limit} END ORDER BY f, r"
    ).fetchall()
    found: dict[int, list[str]] = {i: [] for i, _ in cats}
    for i, v in rows:
        found[int(i)].append(str(v))
    return found


def fit_params(
    con: duckdb.DuckDBPyConnection, spec: FeatureSpec, rel: str, where_sql: str | None
) -> tuple[list[dict[str, Any]], int]:
    """Fit every feature on the rows of ``rel`` matching ``where_sql`` (all rows if None).

    Returns:
        One parameter dict per feature (in spec order) and the number of training rows.
    """
    where = f" WHERE {where_sql}" if where_sql else ""
    query, slots = _stats_query(spec, rel, where)
    row = con.execute(query).fetchall()[0]
    assert row is not None
    train_rows = int(row[0])
    if train_rows == 0:
        raise InvalidInputError(
            f"no training rows: no row has {spec.split_column} = {spec.train_value!r}"
        )
    params: list[dict[str, Any]] = [{} for _ in spec.features]
    for (i, key), value in zip(slots, row[1:], strict=True):
        if value is None:
            f = spec.features[i]
            raise InvalidInputError(
                f"{describe(f, i)}: column {f.column!r} has no finite values in the training rows"
            )
        params[i][key] = float(value)
    for i, cats in _top_categories(con, spec, rel, where).items():
        params[i]["categories"] = cats
    for i, f in enumerate(spec.features):
        if isinstance(f, TfIdf):
            texts = (
                con.sql(f"SELECT CAST({sql_ident(f.column)} AS VARCHAR) FROM {rel}{where}")
                .to_arrow_table()
                .column(0)
                .to_pylist()
            )
            params[i] = fit_tfidf(texts, f, describe(f, i))
    return params, train_rows


def category_columns(prefix: str, categories: Sequence[str]) -> list[str]:
    """Onehot column names; a category named like the unknown bucket gets a trailing '_'."""
    names: list[str] = []
    taken = {f"{prefix}__unknown"}
    for c in categories:
        name = f"{prefix}__{c}"
        while name in taken:
            name += "_"
        taken.add(name)
        names.append(name)
    return names


def _onehot(f: OneHot, p: dict[str, Any], out: str) -> list[tuple[str, str]]:
    s = f"CAST({sql_ident(f.column)} AS VARCHAR)"
    cats = p["categories"]
    cols = [
        (name, f"CASE WHEN {s} = {sql_string(c)} THEN 1 ELSE 0 END")
        for name, c in zip(category_columns(out, cats), cats, strict=True)
    ]
    known = ", ".join(sql_string(c) for c in cats)
    unknown = f"CASE WHEN {s} IN ({known}) THEN 0 ELSE 1 END" if cats else "1"
    return [*cols, (f"{out}__unknown", unknown)]


def _bucketize(f: Bucketize) -> str:
    x = _num(f.column)
    whens = " ".join(f"WHEN {x} < {_lit(b)} THEN {k}" for k, b in enumerate(f.boundaries))
    return f"CASE WHEN {x} IS NULL THEN NULL {whens} ELSE {len(f.boundaries)} END"


def feature_columns(f: Feature, p: dict[str, Any], udf: str) -> list[tuple[str, str]]:
    """``(output column, SQL expression)`` pairs of one fitted feature."""
    out, x = output_name(f), _num(f.column)
    if isinstance(f, Standardize):
        return [(out, f"({x} - {_lit(p['mean'])}) / {_lit(p['std'] or 1.0)}")]
    if isinstance(f, MinMax):
        span = p["max"] - p["min"]
        return [(out, f"({x} - {_lit(p['min'])}) / {_lit(span or 1.0)}")]
    if isinstance(f, Log1p):
        return [(out, f"CASE WHEN {x} > -1 THEN ln(1 + {x}) END")]
    if isinstance(f, OneHot):
        return _onehot(f, p, out)
    if isinstance(f, Categorical):
        s = f"CAST({sql_ident(f.column)} AS VARCHAR)"
        whens = " ".join(
            f"WHEN {sql_string(c)} THEN {k}" for k, c in enumerate(p["categories"], start=1)
        )
        return [(out, f"CASE {s} {whens} ELSE 0 END" if whens else "0")]
    if isinstance(f, Hash):
        s = f"coalesce(CAST({sql_ident(f.column)} AS VARCHAR), '')"
        return [(out, f"CAST(md5_number_lower({s}) % {f.buckets} AS BIGINT)")]
    if isinstance(f, Bucketize):
        return [(out, _bucketize(f))]
    if isinstance(f, DateParts):
        c = sql_ident(f.column)
        return [
            (f"{out}__{part}", f"CAST(date_part('{_DATE_PARTS[part]}', {c}) AS INTEGER)")
            for part in f.parts
        ]
    return [(out, f"{udf}(CAST({sql_ident(f.column)} AS VARCHAR))")]


def output_columns(
    spec: FeatureSpec, params: Sequence[dict[str, Any]], passthrough: Sequence[str]
) -> list[tuple[str, str]]:
    """All ``(column, expression)`` pairs in output order; fails on a repeated column name."""
    cols = [(c, sql_ident(c)) for c in passthrough]
    owner = {c: f"passthrough column {c!r}" for c in passthrough}
    for i, (f, p) in enumerate(zip(spec.features, params, strict=True)):
        for name, expr in feature_columns(f, p, udf_name(i)):
            if name in owner:
                raise InvalidInputError(
                    f"{describe(f, i)}: output column {name!r} is also made by {owner[name]}; "
                    "give this feature a distinct 'name'"
                )
            owner[name] = describe(f, i)
            cols.append((name, expr))
    return cols


def udf_name(index: int) -> str:
    """The DuckDB function name of the TF-IDF feature at ``index``."""
    return f"__aifab_tfidf_{index}"
