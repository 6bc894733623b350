"""Text and embedding drift: flags, scores, top words, edge cases, and agreement with Evidently."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

from aifab.core.errors import InvalidInputError
from aifab.ops.drift import DriftOptions, column_kind, drift_report
from aifab.ops.drift.domain import fit_domain

CALM = str.split(
    "delivery fast price good quality box arrived package shipping courier order nice fits "
    "colour size soft comfortable recommend gift daughter kitchen garden sturdy light cheap "
    "bought again wrapped neatly early week seller friendly value money perfect works fine"
)
ANGRY = str.split(
    "refund broken screen support angry return battery dead replacement warranty cracked "
    "charger faulty leaking missing parts scam ignored complaint useless stopped overheating"
)


def _reviews(words: list[str], n: int, seed: int, extra: list[str] | None = None) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        pool = words + (extra or []) if extra and rng.random() < 0.6 else words
        out.append(" ".join(rng.choice(pool, rng.integers(6, 20))).capitalize() + ".")
    return out


def _text_report(ref: list, cur: list, **opts: object) -> dict:
    options = DriftOptions(kinds={"review": "text"}, **opts)  # type: ignore[arg-type]
    return drift_report({"review": ref}, {"review": cur}, options)["columns"]["review"]


def test_shifted_texts_drift_with_their_telling_words() -> None:
    col = _text_report(_reviews(CALM, 600, 0), _reviews(CALM, 400, 1, extra=ANGRY))
    dc = col["tests"]["domain_classifier"]
    assert dc["value"] > 0.75 and dc["p_value"] < 1e-6 and dc["drift"] is True
    assert col["drift"] is True and col["kind"] == "text"
    assert set(col["words"]["current"][:5]) <= set(ANGRY)  # what the new texts talk about
    assert not set(col["words"]["reference"]) & set(ANGRY)
    assert {"length.ks", "oov_share.ks", "non_letter_share.ks"} <= col["tests"].keys()
    assert col["tests"]["oov_share.ks"]["drift"] is True  # new words: outside the vocabulary


def test_texts_from_the_same_source_do_not_drift() -> None:
    col = _text_report(_reviews(CALM, 600, 2), _reviews(CALM, 400, 3))
    dc = col["tests"]["domain_classifier"]
    assert 0.4 < dc["value"] < 0.58 and dc["drift"] is False
    assert col["drift"] is False, col["tests"]


def test_the_report_is_reproducible() -> None:
    ref, cur = _reviews(CALM, 300, 4), _reviews(CALM, 200, 5, extra=ANGRY)
    assert _text_report(ref, cur) == _text_report(list(ref), list(cur))


def test_thresholds_per_test_and_per_feature_apply_to_text() -> None:
    ref, cur = _reviews(CALM, 400, 6), _reviews(CALM, 300, 7, extra=ANGRY)
    col = _text_report(
        ref,
        cur,
        text_tests=("domain_classifier",),
        feature_thresholds={"review": {"domain_classifier": 0.999}},
    )
    assert col["tests"]["domain_classifier"]["threshold"] == 0.999
    assert col["drift"] is False  # the raised threshold holds it back
    only_length = _text_report(ref, cur, text_tests=("descriptors",), tests=("psi",))
    assert set(only_length["tests"]) == {"length.psi", "oov_share.psi", "non_letter_share.psi"}
    strict = _text_report(
        ref, cur, text_tests=("descriptors",), feature_thresholds={"review.length": {"ks": 1.1}}
    )
    assert strict["tests"]["length.ks"]["drift"] is True  # p < 1.1 always: threshold per part


def test_empty_window_and_all_null_text_are_skipped_not_raised() -> None:
    ref = _reviews(CALM, 100, 8)
    empty = _text_report(ref, [])
    assert empty["skipped"] == "no values in the current window" and empty["drift"] is False
    nulls = _text_report(ref, [None, float("nan")] * 25)
    assert nulls["skipped"] == "no values in the current window" and nulls["missing"] == 1.0
    opts = DriftOptions(kinds={"review": "text"})
    rep = drift_report({"review": [None] * 10}, {"review": ref}, opts)
    assert rep["skipped"] == {"review": "no values in the reference"}
    assert rep["dataset_drift"] is False


def test_too_few_texts_skip_the_classifier_but_keep_descriptors() -> None:
    col = _text_report(_reviews(CALM, 100, 9), ["hello there", "second text", "third"])
    assert "domain_classifier" not in col["tests"]
    assert "too few texts" in col["notes"][0]
    assert "length.ks" in col["tests"]


def test_non_ascii_texts_and_symbols_only() -> None:
    rng = np.random.default_rng(10)
    cyrillic = str.split("доставка быстро цена хорошо качество коробка посылка заказ курьер")
    chinese = ["退款", "屏幕", "坏了", "电池", "客服", "保修", "更换", "退货"]
    ref = [" ".join(rng.choice(cyrillic, 10)) for _ in range(200)]
    cur = [" ".join(rng.choice(chinese, 10)) for _ in range(200)]
    col = _text_report(ref, cur)
    assert col["drift"] is True and col["tests"]["domain_classifier"]["value"] > 0.95
    assert set(col["words"]["current"]) <= set(chinese) and col["words"]["current"]
    same = _text_report(ref, [" ".join(rng.choice(cyrillic, 10)) for _ in range(200)])
    assert same["tests"]["domain_classifier"]["drift"] is False
    # No word of two letters anywhere: character n-grams still tell emoji from punctuation.
    emoji = _text_report(["🙂 🙂 !"] * 40 + ["🙂"] * 40, ["?? ..."] * 40 + ["?"] * 40)
    assert emoji["tests"]["domain_classifier"]["value"] > 0.95


def test_very_long_texts_cost_what_their_head_costs() -> None:
    ref = [t * 3000 for t in _reviews(CALM, 60, 11)]  # ~150-300 kB each
    cur = [t * 3000 for t in _reviews(ANGRY, 60, 12)]
    t0 = time.perf_counter()
    col = _text_report(ref, cur)
    assert time.perf_counter() - t0 < 60  # a guard against reading whole megabytes per text
    assert col["drift"] is True
    assert col["tests"]["length.ks"]["value"] < 1.0  # lengths are compared in full


def test_embedding_columns_drift_by_mean_distance_and_classifier() -> None:
    rng = np.random.default_rng(13)
    ref = rng.normal(0, 1, (800, 32))
    shifted = rng.normal(0, 1, (300, 32)) + np.r_[0.5, np.zeros(31)]
    same = rng.normal(0, 1, (300, 32))
    opts = DriftOptions(kinds={"e": "embedding"}, embedding_distance="euclidean")
    drifted = drift_report({"e": list(ref)}, {"e": shifted.tolist()}, opts)["columns"]["e"]
    assert drifted["dim"] == 32 and drifted["drift"] is True
    md = drifted["tests"]["mean_distance"]
    assert md["threshold_from"] == "bootstrap" and md["value"] > md["threshold"]
    assert drifted["tests"]["domain_classifier"]["drift"] is True
    calm = drift_report({"e": list(ref)}, {"e": same.tolist()}, opts)["columns"]["e"]
    assert calm["drift"] is False, calm["tests"]
    fixed = DriftOptions(thresholds={"mean_distance": 10.0}, embedding_tests=("mean_distance",))
    held = drift_report({"e": pa.array(ref.tolist())}, {"e": shifted.tolist()}, fixed)
    assert held["columns"]["e"]["tests"]["mean_distance"]["threshold_from"] == "configured"
    assert held["columns"]["e"]["drift"] is False


def test_embedding_rows_of_another_size_or_junk_count_as_missing() -> None:
    rng = np.random.default_rng(14)
    ref = rng.normal(0, 1, (200, 8)).tolist()
    cur = rng.normal(0, 1, (40, 8)).tolist() + [[1.0, 2.0], None, "junk", [float("nan")] * 8]
    col = drift_report({"e": ref}, {"e": cur})["columns"]["e"]
    assert col["kind"] == "embedding" and col["n_cur"] == 40
    assert col["missing"] == pytest.approx(4 / 44)
    wrong = drift_report({"e": ref}, {"e": [[1.0, 2.0]] * 30})["columns"]["e"]
    assert wrong["skipped"] == "no values in the current window"


def test_column_kinds_and_bad_options_are_named() -> None:
    assert column_kind(pa.array([[0.1, 0.2], [0.3, 0.4]])) == "embedding"
    assert column_kind([[1, 2], [3, 4]]) == "embedding"
    with pytest.raises(InvalidInputError, match="text_tests: unknown 'bogus'"):
        drift_report({"x": ["a"]}, {"x": ["a"]}, DriftOptions(text_tests=("bogus",)))
    with pytest.raises(InvalidInputError, match="kinds: x: 'vector' is not one of"):
        drift_report({"x": ["a"]}, {"x": ["a"]}, DriftOptions(kinds={"x": "vector"}))
    with pytest.raises(InvalidInputError, match="embedding_distance: unknown 'manhattan'"):
        DriftOptions(embedding_distance="manhattan").check()


def test_domain_classifier_p_value_matches_random_scores() -> None:
    """The analytic p-value: about 5% of random feature sets pass p < 0.05."""
    rng = np.random.default_rng(15)
    fits = [fit_domain(rng.normal(size=(120, 3)), 60, seed=i) for i in range(60)]
    passed = sum(f.p_value < 0.05 for f in fits)
    assert passed <= 9  # 3 expected; far fewer than a broken test would give


def test_text_flags_agree_with_evidently() -> None:
    """Evidently's DataDriftPreset on the same text column: the same verdicts."""
    from tests.evidently_compat import evidently_text_drift

    cases = {
        "shifted": (_reviews(CALM, 500, 16), _reviews(CALM, 400, 17, extra=ANGRY), True),
        "same": (_reviews(CALM, 500, 18), _reviews(CALM, 400, 19), False),
        "small_shifted": (_reviews(CALM, 120, 20), _reviews(ANGRY, 80, 21), True),
    }
    for name, (ref, cur, expected) in cases.items():
        ours = _text_report(ref, cur, text_tests=("domain_classifier",))["drift"]
        assert ours is expected, name
        assert evidently_text_drift(ref, cur) is expected, name


def test_embedding_flags_agree_with_evidently() -> None:
    from tests.evidently_compat import evidently_embedding_drift

    rng = np.random.default_rng(22)
    ref = rng.normal(0, 1, (600, 16))
    shifted = rng.normal(0, 1, (300, 16)) + 0.4
    same = rng.normal(0, 1, (300, 16))
    for cur, expected in ((shifted, True), (same, False)):
        col = drift_report(
            {"e": ref.tolist()},
            {"e": cur.tolist()},
            DriftOptions(embedding_distance="euclidean"),
        )["columns"]["e"]
        assert col["tests"]["mean_distance"]["drift"] is expected
        assert col["tests"]["domain_classifier"]["drift"] is expected
        assert evidently_embedding_drift(ref, cur, "distance") is expected
        assert evidently_embedding_drift(ref, cur, "model") is expected
