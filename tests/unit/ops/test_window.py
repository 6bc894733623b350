"""Pure measures over request-log rows: feature columns, predictions, objectives, accuracy."""

from __future__ import annotations

import pytest

from aifab.ops.window import feature_columns, labelled_accuracy, predicted_labels, slo_values

ROWS = [
    {
        "status": 200,
        "latency_ms": 5.0,
        "request_id": "r1",
        "input": {"records": [{"a": 1, "b": "x"}, {"a": 2}], "items": 2},
        "output": {"predictions": [{"label": "yes"}, {"label": "no"}]},
    },
    {"status": 422, "latency_ms": 1.0, "request_id": None, "input": None, "output": None},
    {
        "status": 200,
        "latency_ms": 100.0,
        "request_id": "r2",
        "input": {"records": [{"c": True}, "junk"]},
        "output": {"predictions": [{"label": "yes"}]},
    },
    {"status": 503, "latency_ms": 2.0, "input": {"truncated": True, "bytes": 99999}},
]


def test_feature_columns_align_records_with_missing_keys() -> None:
    cols = feature_columns(ROWS)
    assert cols == {"a": [1, 2, None], "b": ["x", None, None], "c": [None, None, True]}


def test_predicted_labels_and_slos() -> None:
    assert predicted_labels(ROWS) == ["yes", "no", "yes"]
    slo = slo_values(ROWS)
    assert slo["requests"] == 4 and slo["error_rate"] == pytest.approx(0.25)
    assert slo["latency_p50_ms"] == pytest.approx(3.5)
    assert slo["latency_p99_ms"] > 90
    assert slo_values([]) == {"requests": 0.0}


def test_labelled_accuracy_joins_by_request_id_and_item() -> None:
    labels = {("r1", 0): "yes", ("r1", 1): "yes", ("r2", 0): "yes", ("zzz", 0): "no"}
    assert labelled_accuracy(ROWS, labels) == {"labelled": 3.0, "accuracy": pytest.approx(2 / 3)}
    assert labelled_accuracy(ROWS, {}) == {"labelled": 0.0}
