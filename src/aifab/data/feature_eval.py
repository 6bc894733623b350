"""A fitted feature transform compiled to NumPy/Arrow code: small batches without DuckDB.

:func:`compile_transform` turns the fitted parameters into one evaluator per feature that
computes exactly what :func:`aifab.data.feature_ops.feature_columns` makes DuckDB compute
(same IEEE operations, glibc's ``log``, the same md5 bits, the same TF-IDF function), with
DuckDB's NULL and NaN rules. An input it cannot reproduce exactly (a cast other than a lossless
numeric one, text of a float or date column) makes it answer None so the caller uses the SQL.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aifab.data.feature_ops import category_columns
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
from aifab.data.feature_text import tfidf_function

__all__ = ["ARROW_TYPES", "CompiledTransform", "compile_transform", "md5_bucket"]

#: DuckDB input types the evaluator reads, as the Arrow types DuckDB hands back.
ARROW_TYPES: dict[str, pa.DataType] = {
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "UTINYINT": pa.uint8(),
    "USMALLINT": pa.uint16(),
    "UINTEGER": pa.uint32(),
    "UBIGINT": pa.uint64(),
    "DOUBLE": pa.float64(),
    "FLOAT": pa.float32(),
    "REAL": pa.float32(),
    "BOOLEAN": pa.bool_(),
    "VARCHAR": pa.string(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us"),
}
Columns = dict[str, pa.Array]
Evaluate = Callable[[Columns], list[tuple[str, pa.Array]]]


class _Unsupported(Exception):
    """A transform (or an input) not reproduced exactly here: the caller uses the SQL."""


def _numbers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``CAST(x AS DOUBLE)`` as float64 values and a NULL mask."""
    if not arr.null_count:  # numpy's int -> float64 rounds as DuckDB's CAST does
        x = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)
        return x, np.zeros(len(x), dtype=bool)
    nulls = np.asarray(arr.is_null(), dtype=bool)
    x = pc.cast(arr, pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
    return np.asarray(x, dtype=np.float64), nulls


def _texts(arr: pa.Array) -> list[str | None]:
    """``CAST(x AS VARCHAR)``: strings as they are, integers and booleans as DuckDB prints them."""
    t = arr.type
    if pa.types.is_string(t):
        return list(arr.to_pylist())
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return list(pc.cast(arr, pa.string()).to_pylist())
    raise _Unsupported(f"text of a {t} column")


def _text_input(type_: pa.DataType) -> None:
    if not (pa.types.is_string(type_) or pa.types.is_integer(type_) or pa.types.is_boolean(type_)):
        raise _Unsupported(f"text of a {type_} column")


def _affine(col: str, out: str, shift: float, scale: float) -> Evaluate:
    def run(cols: Columns) -> list[tuple[str, pa.Array]]:
        x, nulls = _numbers(cols[col])
        return [(out, pa.array((x - shift) / scale, pa.float64(), mask=nulls))]

    return run


def _log1p(col: str, out: str) -> Evaluate:
    def run(cols: Columns) -> list[tuple[str, pa.Array]]:
        x, nulls = _numbers(cols[col])
        # DuckDB orders NaN above every number, so NaN > -1 holds and ln(NaN) is NaN.
        values = [
            None if n or not (v > -1 or v != v) else math.log(1 + v)
            for v, n in zip(x.tolist(), nulls.tolist(), strict=True)
        ]
        return [(out, pa.array(values, pa.float64()))]

    return run


def _onehot(col: str, out: str, categories: list[str]) -> Evaluate:
    names = category_columns(out, categories)
    known = set(categories)

    def run(cols: Columns) -> list[tuple[str, pa.Array]]:
        s = _texts(cols[col])
        result = [
            (name, pa.array([int(v == c) for v in s], pa.int32()))
            for name, c in zip(names, categories, strict=True)
        ]
        # NULL is not IN the known values: it lands in the unknown bucket.
        result.append((f"{out}__unknown", pa.array([int(v not in known) for v in s], pa.int32())))
        return result

    return run


def _categorical(col: str, out: str, categories: list[str]) -> Evaluate:
    codes: dict[str, int] = {}
    for k, c in enumerate(categories, start=1):
        codes.setdefault(c, k)  # CASE takes the first WHEN that matches

    def run(cols: Columns) -> list[tuple[str, pa.Array]]:
        s = _texts(cols[col])
        return [(out, pa.array([codes.get(v, 0) if v is not None else 0 for v in s], pa.int32()))]

    return run


def md5_bucket(text: str, buckets: int) -> int:
    """DuckDB's ``md5_number_lower(text) % buckets``: the digest's bytes 8-15, little-endian."""
    lower = int.from_bytes(hashlib.md5(text.encode("utf-8")).digest()[8:], "little")
    return lower % buckets


def _hash(col: str, out: str, buckets: int) -> Evaluate:
    def run(cols: Columns) -> list[tuple[str, pa.Array]]:
        s = _texts(cols[col])
        return [(out, pa.array([md5_bucket(v or "", buckets) for v in s], pa.int64()))]

    return run


def _bucketize(col: str, out: str, boundaries: list[float]) -> Evaluate:
    edges = np.asarray([float(b) for b in boundaries], dtype=np.float64)

    def run(cols: Columns) -> list[tuple[str, pa.Array]]:
        x, nulls = _numbers(cols[col])
        # The first boundary above x; NaN (greater than all in DuckDB) gets the last bucket.
        k = np.searchsorted(edges, x, side="right").astype(np.int32)
        return [(out, pa.array(k, pa.int32(), mask=nulls))]

    return run


_PARTS: dict[str, Callable[[Any], int]] = {
    "year": lambda d: int(d.year),
    "month": lambda d: int(d.month),
    "day": lambda d: int(d.day),
    "dayofweek": lambda d: int(d.isoweekday() % 7),  # 0 = Sunday, as DuckDB's 'dow'
    "hour": lambda d: int(getattr(d, "hour", 0)),
}


def _date_parts(col: str, out: str, parts: Sequence[str]) -> Evaluate:
    def run(cols: Columns) -> list[tuple[str, pa.Array]]:
        values = cols[col].to_pylist()
        return [
            (
                f"{out}__{part}",
                pa.array([None if v is None else _PARTS[part](v) for v in values], pa.int32()),
            )
            for part in parts
        ]

    return run


def _tfidf(col: str, out: str, f: TfIdf, p: dict[str, Any]) -> Evaluate:
    apply = tfidf_function(f, p)  # the very function the SQL path registers as a UDF

    def run(cols: Columns) -> list[tuple[str, pa.Array]]:
        return [(out, apply(pa.array(_texts(cols[col]), pa.string())))]

    return run


def _feature(f: Feature, p: dict[str, Any], types: dict[str, pa.DataType]) -> Evaluate:
    col, out = f.column, output_name(f)
    if isinstance(f, Standardize):
        return _affine(col, out, p["mean"], p["std"] or 1.0)
    if isinstance(f, MinMax):
        return _affine(col, out, p["min"], (p["max"] - p["min"]) or 1.0)
    if isinstance(f, Log1p):
        return _log1p(col, out)
    if isinstance(f, Bucketize):
        return _bucketize(col, out, f.boundaries)
    if isinstance(f, DateParts):
        if types[col] not in (pa.date32(), pa.timestamp("us")):
            raise _Unsupported(f"date parts of a {types[col]} column")
        return _date_parts(col, out, f.parts)
    _text_input(types[col])
    if isinstance(f, OneHot):
        return _onehot(col, out, list(p["categories"]))
    if isinstance(f, Categorical):
        return _categorical(col, out, list(p["categories"]))
    if isinstance(f, Hash):
        return _hash(col, out, f.buckets)
    assert isinstance(f, TfIdf)
    return _tfidf(col, out, f, p)


def _cast(arr: pa.Array, target: pa.DataType, rows: int) -> pa.Array:
    """The input column as its fitted type, where Arrow's cast is exactly DuckDB's."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type == target:
        return arr
    if pa.types.is_null(arr.type):
        return pa.nulls(rows, target)
    lossless = (pa.types.is_integer(arr.type) and pa.types.is_integer(target)) or (
        arr.type in (pa.float32(), *_INT_TYPES) and target == pa.float64()
    )
    if not lossless:
        raise _Unsupported(f"cast {arr.type} -> {target}")
    try:  # safe: out-of-range or inexact values raise, and the SQL path names them
        return pc.cast(arr, target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise _Unsupported(f"cast {arr.type} -> {target}") from None


_INT_TYPES = tuple(t for t in ARROW_TYPES.values() if pa.types.is_integer(t))


class CompiledTransform:
    """The evaluator of one fitted transform; call it on a table, get the features or None.

    Args:
        types: the fitted input columns and their Arrow types.
        passthrough: columns copied unchanged.
        features: one evaluator per feature, in spec order.
    """

    def __init__(
        self, types: dict[str, pa.DataType], passthrough: list[str], features: list[Evaluate]
    ) -> None:
        self.types, self.passthrough, self.features = types, passthrough, features

    def __call__(self, table: pa.Table) -> pa.Table | None:
        """The transform's output for ``table``, or None when only the SQL is exact for it.

        Columns are named and typed as the SQL projection's; passthrough columns the table
        lacks are left out.
        """
        rows = table.num_rows
        try:
            cols = {
                name: _cast(table.column(name), t, rows)
                for name, t in self.types.items()
                if name in table.column_names
            }
            out: list[tuple[str, pa.Array]] = [(c, cols[c]) for c in self.passthrough if c in cols]
            for run in self.features:
                out.extend(run(cols))
        except (_Unsupported, ValueError, OverflowError, pa.ArrowException):
            # e.g. a timestamp past year 9999 that Python's datetime cannot hold
            return None
        return pa.Table.from_arrays([a for _, a in out], names=[n for n, _ in out])


def compile_transform(
    spec: FeatureSpec,
    params: Sequence[dict[str, Any]],
    input_schema: Sequence[dict[str, str]],
    passthrough: Sequence[str],
) -> CompiledTransform | None:
    """Compile a fitted transform once; None when some part of it is only exact in SQL."""
    types: dict[str, pa.DataType] = {}
    for c in input_schema:
        t = ARROW_TYPES.get(str(c["type"]).upper())
        if t is None:  # e.g. DECIMAL(18,3), TIMESTAMP WITH TIME ZONE
            return None
        types[c["name"]] = t
    try:
        features = [_feature(f, p, types) for f, p in zip(spec.features, params, strict=True)]
    except _Unsupported:
        return None
    return CompiledTransform(types, list(passthrough), features)
