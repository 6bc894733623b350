"""The drift report: per-column data drift of a current sample against a reference, as pure code.

Columns come as pyarrow arrays, numpy arrays or plain lists (a request-log window); the
reference's type decides how a column is compared: numerical and categorical columns by the
statistical tests, free text and embedding vectors by :mod:`aifab.ops.drift.text` and
:mod:`aifab.ops.drift.embedding`. Missing values are counted, then dropped.
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
from aifab.ops.drift.domain import DEFAULT_AUC, P_VALUE
from aifab.ops.drift.embedding import DISTANCES, EMBEDDING_TESTS
from aifab.ops.drift.stat_tests import DRIFT_TESTS, ColumnPair, Kind, auto_test
from aifab.ops.drift.text import TEXT_TESTS

__all__ = ["KINDS", "DriftOptions", "column_kind", "drift_report"]

#: Column kinds a report knows (``DriftOptions.kinds`` may name any of them).
KINDS = ("numerical", "categorical", "text", "embedding", "image")

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
        kinds: column kinds overriding inference (``numerical`` | ``categorical`` | ``text``
            | ``embedding``).
        drift_share: the share of drifted columns at which the whole dataset counts as drifted.
        text_tests: what text columns run: ``domain_classifier`` (TF-IDF classifier AUC) and
            ``descriptors`` (length, out-of-vocabulary and non-letter shares, each through
            ``tests`` as the column ``<name>.<descriptor>``).
        embedding_tests: what embedding columns run: ``mean_distance`` and
            ``domain_classifier``.
        embedding_distance: ``cosine`` or ``euclidean`` for ``mean_distance``.
        text_rows: texts or vectors per side the classifiers and descriptors read at most.
        top_words: words reported per side of a text column's classifier.
        seed: seeds every sample, split and bootstrap (reports are reproducible).
    """

    tests: tuple[str, ...] = ("auto",)
    thresholds: Mapping[str, float] = field(default_factory=dict)
    feature_thresholds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    kinds: Mapping[str, str] = field(default_factory=dict)
    drift_share: float = 0.5
    text_tests: tuple[str, ...] = TEXT_TESTS
    embedding_tests: tuple[str, ...] = EMBEDDING_TESTS
    embedding_distance: str = "cosine"
    text_rows: int = 2000
    top_words: int = 10
    seed: int = 0

    def check(self) -> None:
        """Raise InvalidInputError naming an unknown test or a bad share."""
        names = {*self.tests, *self.thresholds}
        for per in self.feature_thresholds.values():
            names.update(per)
        rich = {*TEXT_TESTS, *EMBEDDING_TESTS}
        unknown = sorted(n for n in names if n != "auto" and n not in DRIFT_TESTS and n not in rich)
        if unknown:
            known = ", ".join(["auto", *DRIFT_TESTS.names(), *sorted(rich)])
            raise InvalidInputError(f"unknown drift test(s) {', '.join(unknown)} (known: {known})")
        _known("text_tests", self.text_tests, TEXT_TESTS)
        _known("embedding_tests", self.embedding_tests, EMBEDDING_TESTS)
        _known("embedding_distance", (self.embedding_distance,), DISTANCES)
        bad_kinds = sorted(f"{c}: {k!r}" for c, k in self.kinds.items() if k not in KINDS)
        if bad_kinds:
            raise InvalidInputError(f"kinds: {bad_kinds[0]} is not one of {', '.join(KINDS)}")
        if not 0 < self.drift_share <= 1:
            raise InvalidInputError(f"drift_share {self.drift_share}: expected > 0 and <= 1")
        if self.text_rows < 20 or self.top_words < 0:
            raise InvalidInputError("text_rows: expected >= 20; top_words: expected >= 0")

    def threshold(self, column: str, test: str, default: float | None) -> float | None:
        """The threshold of ``test`` on ``column``: per column, else per test, else ``default``."""
        per = self.feature_thresholds.get(column, {})
        if test in per:
            return per[test]
        return self.thresholds.get(test, default)


def _known(field_name: str, names: Sequence[str], known: Sequence[str]) -> None:
    bad = [n for n in names if n not in known]
    if bad:
        raise InvalidInputError(f"{field_name}: unknown {bad[0]!r} (known: {', '.join(known)})")


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
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "image"  # bytes in the lake are images (the only binary column we write)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        v = t.value_type
        if pa.types.is_integer(v) or pa.types.is_floating(v) or pa.types.is_null(v):
            return "embedding"
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
        threshold = opts.threshold(name, test_name, test.default_threshold)
        assert threshold is not None
        value = test(pair)
        drift = value >= threshold if test.higher_is_drift else value < threshold
        tests[test_name] = {"value": value, "threshold": threshold, "drift": bool(drift)}
    return {**out, "tests": tests, "drift": any(t["drift"] for t in tests.values())}


def _domain_test(name: str, result: dict[str, Any], opts: DriftOptions) -> dict[str, Any]:
    """A domain classifier's result judged: AUC at or above the threshold, and beyond chance."""
    threshold = opts.threshold(name, "domain_classifier", DEFAULT_AUC)
    assert threshold is not None
    drift = result["value"] >= threshold and result["p_value"] < P_VALUE
    return {**result, "threshold": threshold, "drift": bool(drift)}


def _skip(out: dict[str, Any]) -> dict[str, Any] | None:
    if out["n_ref"] and out["n_cur"]:
        return None
    side = "reference" if out["n_ref"] == 0 else "current window"
    return {**out, "drift": False, "tests": {}, "skipped": f"no values in the {side}"}


def _text_column(name: str, ref: Values, cur: Values, opts: DriftOptions) -> dict[str, Any]:
    from aifab.ops.drift import text as drift_text

    r, r_missing = drift_text.texts(ref)
    c, c_missing = drift_text.texts(cur)
    out: dict[str, Any] = {
        "kind": "text",
        "n_ref": len(r),
        "n_cur": len(c),
        "ref_missing": r_missing / max(len(r) + r_missing, 1),
        "missing": c_missing / max(len(c) + c_missing, 1),
    }
    if (skipped := _skip(out)) is not None:
        return skipped
    r = drift_text.sample(r, opts.text_rows, opts.seed)
    c = drift_text.sample(c, opts.text_rows, opts.seed + 1)
    tests: dict[str, Any] = {}
    if "domain_classifier" in opts.text_tests:
        dc = drift_text.domain_classifier(r, c, seed=opts.seed, top_words=opts.top_words)
        if "skipped" in dc:
            out["notes"] = [f"domain_classifier: {dc['skipped']}"]
        else:
            out["words"] = dc.pop("words")
            tests["domain_classifier"] = _domain_test(name, dc, opts)
    if "descriptors" in opts.text_tests:
        for d, (rv, cv) in drift_text.descriptors(r, c, seed=opts.seed).items():
            col = _column(f"{name}.{d}", "numerical", rv, cv, opts)
            for test_name, result in col["tests"].items():
                tests[f"{d}.{test_name}"] = result
    return {**out, "tests": tests, "drift": any(t["drift"] for t in tests.values())}


def _embedding_column(name: str, ref: Values, cur: Values, opts: DriftOptions) -> dict[str, Any]:
    from aifab.ops.drift import embedding as emb

    r, r_missing, dim = emb.vectors(ref)
    c, c_missing, _ = emb.vectors(cur, dim)
    out: dict[str, Any] = {
        "kind": "embedding",
        "dim": dim,
        "n_ref": len(r),
        "n_cur": len(c),
        "ref_missing": r_missing / max(len(r) + r_missing, 1),
        "missing": c_missing / max(len(c) + c_missing, 1),
    }
    if (skipped := _skip(out)) is not None:
        return skipped
    rng = np.random.default_rng(opts.seed)
    if len(r) > opts.text_rows:
        r = r[np.sort(rng.choice(len(r), opts.text_rows, replace=False))]
    if len(c) > opts.text_rows:
        c = c[np.sort(rng.choice(len(c), opts.text_rows, replace=False))]
    tests: dict[str, Any] = {}
    if "mean_distance" in opts.embedding_tests:
        metric = opts.embedding_distance
        value, boot = emb.mean_distance(r, c, metric=metric, seed=opts.seed)
        threshold = opts.threshold(name, "mean_distance", None)
        tests["mean_distance"] = {
            "value": value,
            "threshold": boot if threshold is None else threshold,
            "threshold_from": "bootstrap" if threshold is None else "configured",
            "distance": metric,
            "drift": bool(value > (boot if threshold is None else threshold)),
        }
    if "domain_classifier" in opts.embedding_tests:
        dc = emb.domain_classifier(r, c, seed=opts.seed)
        if "skipped" in dc:
            out["notes"] = [f"domain_classifier: {dc['skipped']}"]
        else:
            tests["domain_classifier"] = _domain_test(name, dc, opts)
    return {**out, "tests": tests, "drift": any(t["drift"] for t in tests.values())}


def _image_column(name: str, ref: Values, cur: Values, opts: DriftOptions) -> dict[str, Any]:
    """Image statistics as numerical columns, the 8x8 pixel embedding as an embedding column."""
    from aifab.ops.drift.image import image_features

    ref_list = ref.to_pylist() if isinstance(ref, pa.Array | pa.ChunkedArray) else list(ref)
    cur_list = cur.to_pylist() if isinstance(cur, pa.Array | pa.ChunkedArray) else list(cur)
    r_stats, r_vec, r_missing, r_bad = image_features(ref_list, opts.text_rows, opts.seed)
    c_stats, c_vec, c_missing, c_bad = image_features(cur_list, opts.text_rows, opts.seed + 1)
    out: dict[str, Any] = {
        "kind": "image",
        "n_ref": len(r_vec),
        "n_cur": len(c_vec),
        "ref_missing": r_missing / max(len(ref_list), 1),
        "missing": c_missing / max(len(cur_list), 1),
        "unreadable": c_bad / max(len(cur_list), 1),
    }
    if (skipped := _skip(out)) is not None:
        return skipped
    tests: dict[str, Any] = {}
    for stat, values in r_stats.items():
        col = _column(f"{name}.{stat}", "numerical", values, c_stats[stat], opts)
        for test_name, result in col["tests"].items():
            tests[f"{stat}.{test_name}"] = result
    emb = _embedding_column(f"{name}.pixels", list(r_vec), list(c_vec), opts)
    for test_name, result in emb.get("tests", {}).items():
        tests[f"pixels.{test_name}"] = result
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
        "missing_columns": [...], "skipped": {name: reason}}``; text columns add ``words``
        (the classifier's most telling words per side), embedding columns ``dim``.
    """
    opts = options or DriftOptions()
    opts.check()
    wanted = list(columns) if columns is not None else [c for c in reference if c in current]
    report: dict[str, Any] = {"columns": {}, "missing_columns": [], "skipped": {}}
    todo: list[tuple[str, str]] = []
    for name in wanted:
        if name not in reference or name not in current:
            side = "reference" if name not in reference else "current window"
            report["missing_columns"].append({"column": name, "missing_from": side})
            continue
        todo.append((name, opts.kinds.get(name) or column_kind(reference[name])))

    def one(item: tuple[str, str]) -> dict[str, Any]:
        name, kind = item
        if kind == "text":
            return _text_column(name, reference[name], current[name], opts)
        if kind == "embedding":
            return _embedding_column(name, reference[name], current[name], opts)
        if kind == "image":
            return _image_column(name, reference[name], current[name], opts)
        return _column(name, kind, reference[name], current[name], opts)  # type: ignore[arg-type]

    big = sum(len(reference[n]) + len(current[n]) for n, _ in todo) > _PARALLEL_VALUES
    if big and len(todo) > 1:
        # Sorting and counting release the GIL: columns run on all cores.
        with ThreadPoolExecutor(max_workers=min(len(todo), os.cpu_count() or 1)) as pool:
            results = list(pool.map(one, todo))
    else:
        results = [one(item) for item in todo]
    for (name, _), col in zip(todo, results, strict=True):
        report["columns"][name] = col
        if "skipped" in col:
            report["skipped"][name] = col["skipped"]
    tested = [n for n, c in report["columns"].items() if c["tests"]]
    drifted = [n for n in tested if report["columns"][n]["drift"]]
    share = len(drifted) / len(tested) if tested else 0.0
    report.update(
        drifted=drifted, share=share, dataset_drift=bool(tested) and share >= opts.drift_share
    )
    return report
