"""Drift tests and the drift report: values, flags, bad input, and agreement with Evidently."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats
from scipy.spatial import distance

from aifab.core.errors import InvalidInputError
from aifab.ops.drift import DriftOptions, column_kind, drift_report


def _frames(n: int, seed: int = 0) -> tuple[dict[str, object], dict[str, object]]:
    rng = np.random.default_rng(seed)
    ref = {
        "same_num": rng.normal(0, 1, n),
        "shift_num": rng.normal(0, 1, n),
        "scale_num": rng.lognormal(10, 0.5, n),
        "same_cat": rng.choice(["a", "b", "c"], n),
        "shift_cat": rng.choice(["x", "y", "z"], n),
        "binary": rng.choice(["yes", "no"], n),
        "small_int": rng.integers(0, 4, n),
    }
    cur = {
        "same_num": rng.normal(0, 1, n),
        "shift_num": rng.normal(0.6, 1, n),
        "scale_num": rng.lognormal(10, 0.5, n) * 1.5,
        "same_cat": rng.choice(["a", "b", "c"], n),
        "shift_cat": rng.choice(["x", "y", "z"], n, p=[0.7, 0.2, 0.1]),
        "binary": rng.choice(["yes", "no"], n, p=[0.8, 0.2]),
        "small_int": rng.integers(0, 4, n),
    }
    return ref, cur


def _arrow(d: dict[str, object]) -> dict[str, pa.Array]:
    return {k: pa.array(v) for k, v in d.items()}


def test_report_flags_shifted_columns_only() -> None:
    ref, cur = _frames(5000)
    rep = drift_report(_arrow(ref), _arrow(cur))
    assert sorted(rep["drifted"]) == ["binary", "scale_num", "shift_cat", "shift_num"]
    assert rep["share"] == pytest.approx(4 / 7)
    assert rep["dataset_drift"] is True
    assert rep["columns"]["shift_num"]["tests"].keys() == {"wasserstein"}
    assert rep["columns"]["shift_cat"]["tests"].keys() == {"jensenshannon"}


def test_values_match_scipy() -> None:
    ref, cur = _frames(3000, seed=1)
    opts = DriftOptions(tests=("ks", "wasserstein", "jensenshannon", "chisquare", "psi"))
    rep = drift_report(_arrow(ref), _arrow(cur), opts)
    num = rep["columns"]["shift_num"]["tests"]
    assert num["ks"]["value"] == pytest.approx(
        stats.ks_2samp(ref["shift_num"], cur["shift_num"]).pvalue
    )
    w = stats.wasserstein_distance(ref["shift_num"], cur["shift_num"]) / np.std(ref["shift_num"])
    assert num["wasserstein"]["value"] == pytest.approx(w, rel=1e-9)
    cat = rep["columns"]["shift_cat"]["tests"]
    r = np.array([np.sum(ref["shift_cat"] == k) for k in ("x", "y", "z")], dtype=float)
    c = np.array([np.sum(cur["shift_cat"] == k) for k in ("x", "y", "z")], dtype=float)
    assert cat["jensenshannon"]["value"] == pytest.approx(
        distance.jensenshannon(r / r.sum(), c / c.sum())
    )
    assert cat["chisquare"]["value"] == pytest.approx(
        stats.chisquare(c, r * c.sum() / r.sum()).pvalue
    )
    assert "ks" not in cat and "wasserstein" not in cat  # no order among categories
    assert num["psi"]["value"] > 0.2 and rep["columns"]["same_num"]["tests"]["psi"]["value"] < 0.05


def test_wasserstein_on_unequal_sizes_is_close_to_exact() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.normal(0, 1, 50_000), rng.normal(0.3, 1.2, 7_000)
    rep = drift_report({"v": a}, {"v": b}, DriftOptions(tests=("wasserstein",)))
    exact = stats.wasserstein_distance(a, b) / np.std(a)
    assert rep["columns"]["v"]["tests"]["wasserstein"]["value"] == pytest.approx(exact, rel=0.02)


def test_thresholds_per_test_and_per_feature() -> None:
    ref, cur = _frames(3000, seed=2)
    opts = DriftOptions(
        thresholds={"wasserstein": 5.0}, feature_thresholds={"shift_num": {"wasserstein": 0.01}}
    )
    rep = drift_report(_arrow(ref), _arrow(cur), opts)
    assert "shift_num" in rep["drifted"]
    assert "scale_num" not in rep["drifted"]  # the raised global threshold holds it back
    assert rep["columns"]["shift_num"]["tests"]["wasserstein"]["threshold"] == 0.01


def test_missing_values_counted_and_missing_columns_reported() -> None:
    ref = {"age": pa.array([30.0, 40.0, None, 50.0] * 100), "plan": pa.array(["a", "b"] * 200)}
    cur = {"age": [31, "junk", None, float("nan"), float("inf")] * 20}
    rep = drift_report(ref, cur, columns=["age", "plan", "nope"])
    assert rep["columns"]["age"]["missing"] == pytest.approx(0.8)
    assert rep["columns"]["age"]["ref_missing"] == pytest.approx(0.25)
    missing = {m["column"]: m["missing_from"] for m in rep["missing_columns"]}
    assert missing == {"plan": "current window", "nope": "reference"}


def test_empty_current_column_is_skipped_not_raised() -> None:
    rep = drift_report({"x": np.arange(100.0)}, {"x": [None, "a"]})
    assert rep["columns"]["x"]["skipped"] == "no values in the current window"
    assert rep["dataset_drift"] is False and rep["share"] == 0.0


def test_dates_and_text_kinds() -> None:
    import datetime as dt

    dates = pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=i) for i in range(400)])
    assert column_kind(dates) == "numerical"
    text = pa.array([f"ticket number {i} says the sync is broken again today" for i in range(400)])
    assert column_kind(text) == "text"
    rep = drift_report({"d": dates, "t": text}, {"d": ["2020-01-05"] * 50, "t": ["hi"] * 50})
    assert rep["columns"]["t"]["kind"] == "text" and rep["columns"]["t"]["drift"] is True
    assert rep["columns"]["d"]["n_cur"] == 50  # ISO dates from JSON compare with date columns


def test_unknown_test_is_named() -> None:
    with pytest.raises(InvalidInputError, match="unknown drift test.*bogus"):
        drift_report({"x": [1.0]}, {"x": [1.0]}, DriftOptions(tests=("bogus",)))


def test_flags_agree_with_evidently_data_drift_preset() -> None:
    """The same data through Evidently's DataDriftPreset: the same columns drift."""
    pd = pytest.importorskip("pandas")
    from tests.evidently_compat import evidently_drift_flags

    for n, seed in ((600, 4), (4000, 5)):  # both sides of Evidently's 1,000-row switch
        ref, cur = _frames(n, seed)
        ref["small_int"] = ref["small_int"].astype(float)
        cur["small_int"] = cur["small_int"].astype(float)
        num = ["same_num", "shift_num", "scale_num", "small_int"]
        cat = ["same_cat", "shift_cat", "binary"]
        flags = evidently_drift_flags(pd.DataFrame(ref), pd.DataFrame(cur), num, cat)
        assert flags.keys() == set(num + cat) and any(flags.values()) and not all(flags.values())
        kinds = {c: "numerical" for c in num} | {c: "categorical" for c in cat}
        rep = drift_report(_arrow(ref), _arrow(cur), DriftOptions(kinds=kinds))
        ours = {c: rep["columns"][c]["drift"] for c in num + cat}
        assert ours == flags, (n, ours, flags)


def test_parallel_columns_give_the_same_report(monkeypatch: pytest.MonkeyPatch) -> None:
    import aifab.ops.drift.report as drift

    ref, cur = _frames(2000, seed=9)
    serial = drift_report(_arrow(ref), _arrow(cur))
    monkeypatch.setattr(drift, "_PARALLEL_VALUES", 0)
    assert drift_report(_arrow(ref), _arrow(cur)) == serial
