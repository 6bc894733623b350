"""The drift report: per-column data drift of a current sample against a reference, as pure code.

Columns come as pyarrow arrays, numpy arrays or plain lists (a request-log window); the
reference's type decides how a column is compared. Missing values are counted, then dropped.
"""

from __future__ import annotations

import datetime as dt
import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aifab.core.errors import InvalidInputError
from aifab.ops.drift_tests import DRIFT_TESTS, ColumnPair, Kind, auto_test

__all__ = ["DriftOptions", "column_kind", "drift_report"]

#: Beyond this many values in all, columns are compared on a thread pool.
_PARALLEL_VALUES = 2_000_000

#: A column: pyarrow array, numpy array or plain list.
Values: TypeAlias = Any


@dataclass(frozen=True)
class DriftOptions:
    """What to test and where drift starts.

    Attributes:
        tests: test names per column (``auto`` picks one like Evidently does); a column drifts
            when any of its tests flags it.
        thresholds: per-test thresholds overriding each test's default.
        feature_thresholds: per-column, per-test thresholds (``{"age": {"psi": 0.3}}``).
        kinds: column kinds overriding inference (``numerical`` | ``categorical`` | ``text``).
        drift_share: the share of drifted columns at which the whole dataset counts as drifted.
    """

    tests: tuple[str, ...] = ("auto",)
    thresholds: Mapping[str, float] = field(default_factory=dict)
    feature_thresholds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    kinds: Mapping[str, str] = field(default_factory=dict)
    drift_share: float = 0.5

    def check(self) -> None:
        """Raise InvalidInputError naming an unknown test or a bad share."""
        names = {*self.tests, *self.thresholds}
        for per in self.feature_thresholds.values():
            names.update(per)
        unknown = sorted(n for n in names if n != "auto" and n not in DRIFT_TESTS)
        if unknown:
            known = ", ".join(["auto", *DRIFT_TESTS.names()])
            raise InvalidInputError(f"unknown drift test(s) {', '.join(unknown)} (known: {known})")
        if not 0 < self.drift_share <= 1:
            raise InvalidInputError(f"drift_share {self.drift_share}: expected > 0 and <= 1")


def column_kind(values: Values) -> str:
    """``numerical`` | ``categorical`` | ``text`` of a reference column, from its type."""
    arr = values if isinstance(values, pa.Array | pa.ChunkedArray) else _to_arrow(values)
    t = arr.type
    if pa.types.is_boolean(t):
        return "categorical"
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "numerical"
    if pa.types.is_temporal(t):
        return "numerical"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t):
        sample = arr.slice(0, 2000).cast(pa.string()) if not pa.types.is_dictionary(t) else None
        if sample is not None and len(sample) > 0:
            lengths = pc.utf8_length(sample)
            mean_len = pc.mean(lengths).as_py() or 0.0
            distinct = len(pc.unique(sample)) / max(len(sample), 1)
            if mean_len > 30 and distinct > 0.2:
                return "text"
        return "categorical"
    return "categorical"


def _to_arrow(values: Values) -> pa.Array | pa.ChunkedArray:
    if isinstance(values, pa.Array | pa.ChunkedArray):
        return values
    if isinstance(values, np.ndarray):
        return pa.array(values)
    try:
        return pa.array(list(values))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values])


def _date_number(value: str) -> float:
    return float(dt.date.fromisoformat(value[:10]).toordinal() - 719163)  # days since 1970


def _floats(values: Values) -> np.ndarray:
    """Float64 values, NaN where missing or not a number (dates become days since 1970)."""
    if isinstance(values, pa.Array | pa.ChunkedArray):
        t = values.type
        if pa.types.is_date(t):
            values = values.cast(pa.int32())
        elif pa.types.is_timestamp(t):
            values = values.cast(pa.int64())
        if pa.types.is_integer(values.type) or pa.types.is_floating(values.type):
            return np.asarray(values.cast(pa.float64()).to_numpy(zero_copy_only=False))
        values = values.to_pylist()
    elif isinstance(values, np.ndarray) and values.dtype.kind in "biuf":
        return values.astype(np.float64, copy=False)
    out = np.empty(len(values), dtype=np.float64)
    for i, v in enumerate(values):
        out[i] = _one_float(v)
    return out


def _one_float(v: Any) -> float:
    if isinstance(v, bool) or v is None:
        return math.nan
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, dt.date):
        return _date_number(v.isoformat())
    try:
        return float(v)
    except (TypeError, ValueError):
        try:
            return _date_number(str(v))
        except ValueError:
            return math.nan


def _category_counts(values: Values) -> tuple[dict[str, int], int]:
    """Counts per category (as text) and how many values were missing."""
    if isinstance(values, pa.Array | pa.ChunkedArray):
        missing = values.null_count
        # Dictionary arrays are counted by code: no strings are built.
        vc = pc.value_counts(values.drop_null())
        cats = [str(c) for c in vc.field("values").to_pylist()]
        counts: dict[str, int] = {}
        for c, n in zip(cats, vc.field("counts").to_pylist(), strict=True):
            counts[c] = counts.get(c, 0) + n  # 1 and "1" are one category as text
        return counts, missing
    counts = Counter(str(v) for v in values if v is not None and v == v)
    return dict(counts), len(values) - sum(counts.values())


def _pair(kind: Kind, ref: Values, cur: Values) -> tuple[ColumnPair, dict[str, float]]:
    if kind == "numerical":
        r, c = _floats(ref), _floats(cur)
        rf, cf = r[np.isfinite(r)], c[np.isfinite(c)]
        missing = {
            "ref_missing": 1 - len(rf) / max(len(r), 1),
            "missing": 1 - len(cf) / max(len(c), 1),
        }
        return ColumnPair(kind, ref_sorted=np.sort(rf), cur_sorted=np.sort(cf)), missing
    rc, rmiss = _category_counts(ref)
    cc, cmiss = _category_counts(cur)
    keys = list(rc) + [k for k in cc if k not in rc]
    pair = ColumnPair(
        kind,
        ref_counts=np.array([rc.get(k, 0) for k in keys], dtype=np.float64),
        cur_counts=np.array([cc.get(k, 0) for k in keys], dtype=np.float64),
    )
    missing = {
        "ref_missing": rmiss / max(rmiss + sum(rc.values()), 1),
        "missing": cmiss / max(cmiss + sum(cc.values()), 1),
    }
    return pair, missing


def _column(name: str, kind: Kind, ref: Values, cur: Values, opts: DriftOptions) -> dict[str, Any]:
    pair, missing = _pair(kind, ref, cur)
    out: dict[str, Any] = {"kind": kind, "n_ref": pair.n_ref, "n_cur": pair.n_cur, **missing}
    if pair.n_ref == 0 or pair.n_cur == 0:
        side = "reference" if pair.n_ref == 0 else "current window"
        return {**out, "drift": False, "tests": {}, "skipped": f"no values in the {side}"}
    tests: dict[str, Any] = {}
    for requested in opts.tests:
        test_name = auto_test(pair) if requested == "auto" else requested
        test = DRIFT_TESTS.get(test_name)
        if kind == "categorical" and test_name in ("ks", "wasserstein"):
            continue  # distances on an order categories do not have
        threshold = opts.feature_thresholds.get(name, {}).get(
            test_name, opts.thresholds.get(test_name, test.default_threshold)
        )
        value = test(pair)
        drift = value >= threshold if test.higher_is_drift else value < threshold
        tests[test_name] = {"value": value, "threshold": threshold, "drift": bool(drift)}
    return {**out, "tests": tests, "drift": any(t["drift"] for t in tests.values())}


def drift_report(
    reference: Mapping[str, Values],
    current: Mapping[str, Values],
    options: DriftOptions | None = None,
    *,
    columns: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Compare each column of ``current`` with the same column of ``reference``.

    Args:
        reference: column -> values the model was trained on.
        current: column -> values seen since (e.g. a request-log window).
        options: tests, thresholds and kinds (defaults: Evidently-like ``auto``).
        columns: the columns to compare (default: those of ``reference`` also in ``current``);
            a named column absent from either side is listed in ``missing_columns``.

    Returns:
        ``{"columns": {name: {kind, n_ref, n_cur, missing, tests: {test: {value, threshold,
        drift}}, drift}}, "drifted": [...], "share": float, "dataset_drift": bool,
        "missing_columns": [...], "skipped": {name: reason}}``.
    """
    opts = options or DriftOptions()
    opts.check()
    wanted = list(columns) if columns is not None else [c for c in reference if c in current]
    report: dict[str, Any] = {"columns": {}, "missing_columns": [], "skipped": {}}
    todo: list[tuple[str, Kind]] = []
    for name in wanted:
        if name not in reference or name not in current:
            side = "reference" if name not in reference else "current window"
            report["missing_columns"].append({"column": name, "missing_from": side})
            continue
        kind = opts.kinds.get(name) or column_kind(reference[name])
        if kind == "text":
            report["skipped"][name] = "free text: not compared value by value"
            continue
        if kind not in ("numerical", "categorical"):
            raise InvalidInputError(f"kinds.{name}: {kind!r} is not numerical, categorical or text")
        todo.append((name, kind))  # type: ignore[arg-type]

    def one(item: tuple[str, Kind]) -> dict[str, Any]:
        return _column(item[0], item[1], reference[item[0]], current[item[0]], opts)

    big = sum(len(reference[n]) + len(current[n]) for n, _ in todo) > _PARALLEL_VALUES
    if big and len(todo) > 1:
        # Sorting and counting release the GIL: columns run on all cores.
        with ThreadPoolExecutor(max_workers=min(len(todo), os.cpu_count() or 1)) as pool:
            results = list(pool.map(one, todo))
    else:
        results = [one(item) for item in todo]
    for (name, _), col in zip(todo, results, strict=True):
        report["columns"][name] = col
    tested = [n for n, c in report["columns"].items() if c["tests"]]
    drifted = [n for n in tested if report["columns"][n]["drift"]]
    share = len(drifted) / len(tested) if tested else 0.0
    report.update(
        drifted=drifted, share=share, dataset_drift=bool(tested) and share >= opts.drift_share
    )
    return report
