"""``engine: ray`` for feature specs: the fit as distributed passes, the transform per block.

The fitted :class:`~aifab.data.feature_transform.FeatureTransform` has the DuckDB engine's
shape (serving is unchanged); each block is transformed by its own ``select_sql`` in DuckDB.
Means, stds, mins and maxes are summed exactly over blocks (``math.fsum``; the std from a
second pass over deviations), so they equal DuckDB's ``avg``/``stddev_pop`` to ~1e-12
relative; top categories are a distributed group-by with DuckDB's tie-break (by value).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from aifab.core.errors import InvalidInputError
from aifab.data.catalog import CommitResult, VersionInfo
from aifab.data.engines import blocks, ray_data
from aifab.data.feature_ops import describe
from aifab.data.feature_spec import Categorical, FeatureSpec, MinMax, OneHot, Standardize, TfIdf
from aifab.data.feature_text import fit_tfidf
from aifab.data.feature_transform import FeatureTransform
from aifab.data.lake import sql_ident


def _num(column: str) -> str:
    return f"CAST({sql_ident(column)} AS DOUBLE)"


def _finite(block: pa.Table, spec: FeatureSpec, means: Sequence[float | None]) -> pa.Table:
    """Per feature, one row per block: count, fsum, min, max of the finite values.

    Where ``means`` are given, also the fsum of squared deviations from them.
    """
    import numpy as np

    numeric = [i for i, f in enumerate(spec.features) if isinstance(f, Standardize | MinMax)]
    row: dict[str, Any] = {"rows": [block.num_rows]}
    if not numeric:
        return pa.table(row)
    cols = ", ".join(f"{_num(spec.features[i].column)} AS c{i}" for i in numeric)
    t = blocks.run_sql(block, f"SELECT {cols} FROM {blocks.BLOCK}")
    for k, i in enumerate(numeric):
        v = np.asarray(t.column(k).to_numpy(zero_copy_only=False), dtype=np.float64)
        v = v[np.isfinite(v)]
        m = means[i]
        row[f"n{i}"] = [len(v)]
        row[f"s{i}"] = [math.fsum(v) if len(v) else 0.0]
        row[f"d{i}"] = [math.fsum((v - m) ** 2) if m is not None and len(v) else 0.0]
        row[f"lo{i}"] = [float(v.min()) if len(v) else math.inf]
        row[f"hi{i}"] = [float(v.max()) if len(v) else -math.inf]
    return pa.table(row)


def _passes(ds: Any, spec: FeatureSpec, means: Sequence[float | None]) -> list[dict[str, Any]]:
    out = ds.map_batches(
        _finite,
        batch_size=None,
        batch_format="pyarrow",
        fn_kwargs={"spec": spec, "means": list(means)},
    )
    rows: list[dict[str, Any]] = []
    for b in ray_data.iter_blocks(out):
        rows.extend(b.to_pylist())
    return rows


def _category_counts(block: pa.Table, cats: list[tuple[int, str]]) -> pa.Table:
    parts = [
        f"SELECT {i} AS f, CAST({sql_ident(c)} AS VARCHAR) AS v, count(*) AS n "
        f"FROM {blocks.BLOCK} WHERE {sql_ident(c)} IS NOT NULL GROUP BY 2"
        for i, c in cats
    ]
    return blocks.run_sql(block, " UNION ALL ".join(parts))


def _top_categories(ds: Any, spec: FeatureSpec) -> dict[int, list[str]]:
    """The most frequent values per onehot/categorical feature; ties broken by value."""
    cats = [(i, f) for i, f in enumerate(spec.features) if isinstance(f, OneHot | Categorical)]
    if not cats:
        return {}
    counts = ds.map_batches(
        _category_counts,
        batch_size=None,
        batch_format="pyarrow",
        fn_kwargs={"cats": [(i, f.column) for i, f in cats]},
    )
    totals = counts.groupby(["f", "v"]).sum("n")
    limits = {i: f.max_categories for i, f in cats}
    heaps: dict[int, list[tuple[int, _Desc]]] = {i: [] for i, _ in cats}
    for b in ray_data.iter_blocks(totals):
        for f, v, n in zip(*(b.column(k).to_pylist() for k in range(3)), strict=True):
            # Keep the best (count desc, value asc): a min-heap on (count, -value order).
            heap, item = heaps[int(f)], (int(n), _Desc(v))
            if len(heap) < limits[int(f)]:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heapreplace(heap, item)
    return {i: [d.value for _, d in sorted(h, reverse=True)] for i, h in heaps.items()}


class _Desc:
    """A string that orders in reverse (so a smaller value ranks higher in the heap)."""

    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        self.value = value

    def __lt__(self, other: _Desc) -> bool:
        return self.value > other.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def fit_params_on_ray(
    v: VersionInfo, spec: FeatureSpec, where_sql: str | None
) -> tuple[list[dict[str, Any]], int]:
    """:func:`aifab.data.feature_ops.fit_params` on Ray Data (same results and errors)."""
    ds, _ = ray_data.read_version(v, None)
    if where_sql:
        ds = ray_data.map_sql(ds, f"SELECT * FROM {blocks.BLOCK} WHERE {where_sql}")
    # Every pass below reads the training rows again: keep them (Ray spills past its store).
    ds = ds.materialize()
    first = _passes(ds, spec, [None] * len(spec.features))
    train_rows = sum(r["rows"] for r in first)
    if train_rows == 0:
        raise InvalidInputError(
            f"no training rows: no row has {spec.split_column} = {spec.train_value!r}"
        )
    n = [sum(r.get(f"n{i}", 0) for r in first) for i in range(len(spec.features))]
    means = [
        math.fsum(r.get(f"s{i}", 0.0) for r in first) / n[i] if n[i] else None
        for i in range(len(n))
    ]
    needs_std = any(isinstance(f, Standardize) for f in spec.features)
    second = _passes(ds, spec, means) if needs_std else first
    params: list[dict[str, Any]] = [{} for _ in spec.features]
    for i, f in enumerate(spec.features):
        if not isinstance(f, Standardize | MinMax):
            continue
        if not n[i]:
            raise InvalidInputError(
                f"{describe(f, i)}: column {f.column!r} has no finite values in the training rows"
            )
        if isinstance(f, Standardize):
            params[i]["mean"] = float(means[i] or 0.0)
            params[i]["std"] = math.sqrt(math.fsum(r[f"d{i}"] for r in second) / n[i])
        else:
            params[i]["min"] = min(r[f"lo{i}"] for r in first)
            params[i]["max"] = max(r[f"hi{i}"] for r in first)
    for i, cats in _top_categories(ds, spec).items():
        params[i]["categories"] = cats
    for i, f in enumerate(spec.features):
        if isinstance(f, TfIdf):
            # Fitting a vocabulary needs every training text, as in the DuckDB engine.
            texts: list[Any] = []
            for b in ray_data.iter_blocks(ds.select_columns([f.column])):
                texts.extend(b.column(0).cast(pa.string()).to_pylist())
            params[i] = fit_tfidf(texts, f, describe(f, i))
    return params, train_rows


def _transform_block(block: pa.Table, ft: FeatureTransform, columns: list[str]) -> pa.Table:
    con = blocks.block_connection()
    try:
        ft.register(con)
        con.register(blocks.BLOCK, block)
        return con.sql(ft.select_sql(blocks.BLOCK, columns)).to_arrow_table()
    finally:
        con.close()


def commit_features_on_ray(
    ft: FeatureTransform, v: VersionInfo, name: str, transform: dict[str, Any]
) -> CommitResult:
    """Transform every block of ``v`` with ``ft`` and commit the result as ``name``."""
    ds, schema = ray_data.read_version(v, None)
    kwargs: dict[str, Any] = {"ft": ft, "columns": v.columns}
    out_schema = _transform_block(schema.empty_table(), **kwargs).schema
    out = ds.map_batches(
        _transform_block, batch_size=None, batch_format="pyarrow", fn_kwargs=kwargs
    )
    return ray_data.commit_dataset(
        out, out_schema, name, source=f"features({v.ref})", transform=transform, parents=[v]
    )
