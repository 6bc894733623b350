"""The feature transform as ONNX ops: every expressible transform equals serving's encoder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# Rows shaped like real exports: mixed case, punctuation, accents, emoji, empty and missing
# text, unknown and missing categories, leap days, January/February dates (the day-of-week
# year shift), negative and huge numbers.
ROWS = [
    ("1", "Please CANCEL my account!! Cancel it.", "Pro", "us", "2020-02-29", "-3.5", "120"),
    ("2", "", "basic", "", "2000-01-01", "0", "7"),
    (
        "3",
        "Ünïcode wörds, naïve café; snake_case 42 x",
        "Enterprise",
        "de",
        "1999-12-31",
        "1e6",
        "3",
    ),
    ("4", "a b c", "pro", "fr", "2024-03-01", "12.25", "0"),
    ("5", "the price increase is too much... the price!", "basic", "us", "2023-07-04", "8", "45"),
    ("6", "emoji 🙂 thanks thanks thanks", "pro", "jp", "1970-01-01", "-0.5", "1"),
    ("7", "export exporting export", "basic", "zz", "2016-02-28", "3.25", "9"),
    ("8", "Great   helpful\tteam\nthanks", "pro", "", "2021-11-15", "99", "2"),
]
HEADER = "id,text,plan,country,day,amount,count"


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


def _csv(path: Path) -> Path:
    def cell(v: str) -> str:
        return '"' + v.replace('"', '""') + '"' if v else ""

    lines = [HEADER, *(",".join(cell(v) for v in row) for row in ROWS)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


SPEC = {
    "features": [
        {"transform": "standardize", "column": "amount"},
        {"transform": "minmax", "column": "count", "name": "count_mm"},
        {"transform": "log1p", "column": "count", "name": "count_log"},
        {"transform": "bucketize", "column": "amount", "name": "amount_b", "boundaries": [0, 5]},
        {"transform": "onehot", "column": "plan", "max_categories": 2},
        {"transform": "categorical", "column": "country", "max_categories": 3},
        {
            "transform": "date_parts",
            "column": "day",
            "parts": ["year", "month", "day", "dayofweek", "hour"],
        },
        {"transform": "tfidf", "column": "text", "name": "t1", "ngram_max": 3},
        {"transform": "tfidf", "column": "text", "name": "t2", "sublinear_tf": True},
        {"transform": "tfidf", "column": "text", "name": "t3", "lowercase": False},
    ],
    "passthrough": ["id"],
}


@pytest.fixture(scope="module")
def fitted(module_workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from aifab.data import fit_features, ingest

    tmp = tmp_path_factory.mktemp("features")
    ingest("rows", _csv(tmp / "rows.csv"))
    return fit_features("rows", SPEC).transform


def _model_dir(tmp: Path, ft: Any, features: list[str]) -> tuple[Path, dict[str, Any]]:
    ft.save(tmp / "feature_transform.json")
    pre = {
        "modality": "tabular",
        "classes": ["a", "b"],
        "label": "label",
        "features": features,
        "feature_transform": {"file": "feature_transform.json"},
    }
    sidecar = {"builder": "mlp", "config": {}, "meta": {"preprocess": pre}}
    (tmp / "aifab-model.json").write_text(json.dumps(sidecar))
    return tmp, sidecar


def _run(pre: Any, records: list[dict[str, Any]]) -> np.ndarray:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from aifab.inference.export_check import feeds
    from aifab.inference.onnx_features import ML_OPSET, OPSET

    types = {"string": TensorProto.STRING, "number": TensorProto.FLOAT}
    graph = helper.make_graph(
        pre.nodes,
        "pre",
        [helper.make_tensor_value_info(f.name, types[f.type], ["n"]) for f in pre.fields],
        [helper.make_tensor_value_info(pre.output, TensorProto.FLOAT, ["n", None])],
        pre.initializers,
    )
    opsets = [("", OPSET), ("ai.onnx.ml", ML_OPSET), ("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(*o) for o in opsets])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run([pre.output], feeds(pre.fields, records))[0])


def _records(encoder: Any) -> list[dict[str, Any]]:
    names = HEADER.split(",")
    records = []
    for row in ROWS:
        raw = dict(zip(names, row, strict=True))
        rec: dict[str, Any] = {}
        for c in encoder.columns:
            v = raw[c.name]
            if c.type in ("integer", "number"):
                rec[c.name] = float(v) if c.type == "number" else int(v)
            else:
                rec[c.name] = v or None
        records.append(rec)
    return records


def test_every_expressible_transform_matches_serving(fitted: Any, tmp_path: Path) -> None:
    from aifab.inference.classifier_encoding import build_encoder
    from aifab.inference.onnx_features import preprocess_graph

    # Shuffled: the graph assembles columns in the model's order, not the transform's.
    features = [c for c in fitted.output_columns if c != "id"]
    features = features[3:] + features[:3]
    model_dir, sidecar = _model_dir(tmp_path, fitted, features)
    encoder = build_encoder(model_dir, sidecar)
    records = _records(encoder)
    expected = encoder(records)["x"]
    pre = preprocess_graph(model_dir, sidecar)
    assert {f.name for f in pre.fields} == {"text", "plan", "country", "day", "amount", "count"}
    got = _run(pre, records)
    assert got.shape == expected.shape and expected.shape[1] > 20
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    # Dates: day of week (0 = Sunday) and the other parts exactly.
    dow = features.index("day__dayofweek")
    assert got[:, dow].tolist() == expected[:, dow].tolist() == [6, 6, 5, 5, 2, 4, 0, 1]
    # One row at a time gives the same rows (no batch-dependent padding effects).
    for i, rec in enumerate(records):
        np.testing.assert_allclose(_run(pre, [rec])[0], expected[i], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("feature", "reason"),
    [
        ({"transform": "hash", "column": "plan", "buckets": 8}, "hash has no ONNX form"),
        ({"transform": "onehot", "column": "count"}, "onehot of a BIGINT column"),
    ],
)
def test_inexpressible_transforms_are_named(
    feature: dict[str, Any], reason: str, tmp_path: Path
) -> None:
    from aifab.data import fit_features
    from aifab.inference.onnx_features import Inexpressible, preprocess_graph

    ft = fit_features("rows", {"features": [feature]}, output=f"rows_{tmp_path.name}").transform
    features = [c for c in ft.output_columns if c not in ft.passthrough]
    model_dir, sidecar = _model_dir(tmp_path, ft, features)
    with pytest.raises(Inexpressible, match=reason):
        preprocess_graph(model_dir, sidecar)


def test_plain_standardized_features(tmp_path: Path) -> None:
    from aifab.inference.classifier_encoding import build_encoder
    from aifab.inference.onnx_features import preprocess_graph

    pre = {
        "modality": "tabular",
        "classes": ["a", "b"],
        "features": ["f1", "f2"],
        "standardize": {"mean": [1.5, -2.0], "std": [0.5, 3.0]},
    }
    sidecar = {"builder": "mlp", "config": {"in_features": 2}, "meta": {"preprocess": pre}}
    encoder = build_encoder(tmp_path, sidecar)
    records = [{"f1": 1.0, "f2": 4.0}, {"f1": -7.25, "f2": 0}]
    graph = preprocess_graph(tmp_path, sidecar)
    np.testing.assert_array_equal(_run(graph, records), encoder(records)["x"])
