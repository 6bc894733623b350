"""The classifier handler: raw rows in, the training-time logits out (no train/serve skew) for
tabular (feature transform, plain features), text and image (files, pixels) models; bad input
named by row and field; the ONNX backend. Models are tiny and trained once per module."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aifab.core.errors import InvalidInputError
from aifab.inference.classifier import ClassifierHandler
from aifab.inference.loading import load_served_model
from aifab.models.checkpoint import read_sidecar

FAST = {"system_metrics": False, "threads": 1, "progress": False}


@pytest.fixture(scope="module", autouse=True)
def torch_threads() -> Iterator[None]:
    """Training here uses one thread (``threads: 1``); put torch's setting back afterwards."""
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    """Every test here shares the module's workspace (and its trained models)."""
    return module_workspace


def raw_records(ref: str, columns: list[str]) -> list[dict[str, Any]]:
    """Rows of dataset version ``ref`` as a JSON client would send them (dates as text)."""
    from aifab.data import lake
    from aifab.data.catalog import resolve

    v = resolve(ref)
    con = lake.connect()
    try:
        rows = con.sql(f"SELECT * FROM {v.scan_sql()}").to_arrow_table().to_pylist()
    finally:
        con.close()
    return json.loads(json.dumps([{c: r[c] for c in columns} for r in rows], default=str))


def handler_for(model_dir: Path | str, **options: Any) -> ClassifierHandler:
    h = ClassifierHandler()
    h.setup(Path(model_dir), read_sidecar(model_dir), options)
    return h


def assert_no_skew(
    h: ClassifierHandler, model_dir: Path | str, cfg: dict[str, Any], records: list[dict]
) -> None:
    """Handler logits (decode -> encode_inputs -> forward, and predict) equal the training
    path's (load_data + ClassifyData.forward) for the same rows, bit for bit."""
    import torch

    from aifab.models.checkpoint import load_model
    from aifab.train.classification import load_data
    from aifab.train.recipes.classify import Config

    data = load_data(Config(**cfg))
    model, _ = load_model(model_dir)
    rows = np.arange(len(records))
    with torch.no_grad():
        want = data.forward(model, rows, torch.device("cpu")).numpy()
    decoded = h.decode({"records": records})
    inputs = h.encode_inputs(decoded)
    assert sorted(inputs) == sorted(data.inputs)
    for key, value in inputs.items():
        assert value.dtype == data.inputs[key].dtype
        assert np.array_equal(value, data.inputs[key][rows]), key
    got = h.forward(inputs)
    assert got.dtype == np.float32 and np.array_equal(got, want)
    preds = h.predict(decoded)
    assert [p["label"] for p in preds] == [h.classes[i] for i in want.argmax(axis=1)]
    z = np.exp(want.astype(np.float64) - want.max(axis=1, keepdims=True))
    probs = z / z.sum(axis=1, keepdims=True)
    assert np.array_equal(
        np.array([[p["probabilities"][c] for c in h.classes] for p in preds]), probs
    )


# -- tabular: the quickstart's churn model behind its fitted feature transform -------------


@pytest.fixture(scope="module")
def churn(churn_model: dict[str, Any]) -> Any:
    return load_served_model("churn@champion")


@pytest.fixture(scope="module")
def churn_records(churn: Any) -> list[dict[str, Any]]:
    ref = churn.sidecar["meta"]["datasets"][0]["ref"]
    return raw_records(ref, churn.handler.input_columns)


def test_tabular_feature_transform_serves_exactly_the_training_logits(
    churn: Any, churn_records: list[dict[str, Any]]
) -> None:
    from aifab.data.feature_transform import FeatureTransform

    pre = churn.sidecar["meta"]["preprocess"]
    ft_file = churn.model_dir / "feature_transform.json"
    assert FeatureTransform.load(ft_file).digest == pre["feature_transform"]["digest"]
    cfg = {
        "dataset": churn.sidecar["meta"]["datasets"][0]["ref"],
        "label": pre["label"],
        "features": str(ft_file),
    }
    assert len(churn_records) > 100
    assert_no_skew(churn.handler, churn.model_dir, cfg, churn_records)


def test_churn_describe_rows_and_optional_passthrough(
    churn: Any, churn_records: list[dict[str, Any]]
) -> None:
    h = churn.handler
    d = h.describe()
    assert d["kind"] == "classifier" and d["modality"] == "tabular" and d["backend"] == "torch"
    assert d["classes"] == ["churn", "stay"] == h.classes
    types = {c["name"]: c["type"] for c in d["input_columns"]}
    assert list(types) == h.input_columns
    assert types["age"] == "integer" and types["income"] == "number"
    assert types["plan"] == "string" and types["signup_date"] == "date"
    some = churn_records[:3]
    by_records = h.predict(h.decode({"records": some}))
    rows = [[r[c] for c in h.input_columns] for r in some]
    assert h.predict(h.decode({"rows": rows})) == by_records
    # The id column the transform passes through may come along (and is ignored).
    with_id = [{**r, "customer_id": "C1"} for r in some]
    assert h.predict(h.decode({"records": with_id})) == by_records
    assert json.loads(json.dumps(h.decode({"records": some}))) == some  # loggable as JSON
    # Columns the transform takes as NULL (one-hot -> unknown, TF-IDF -> empty text).
    nullable = {**some[0], "plan": None, "ticket_text": None}
    [pred] = h.predict(h.decode({"records": [nullable]}))
    assert pred["label"] in h.classes and sum(pred["probabilities"].values()) == pytest.approx(1)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"drop": "age"}, r"row 1, field 'age': missing"),
        ({"set": {"bogus": 1}}, r"row 1, field 'bogus': unknown \(expected: age, income"),
        ({"set": {"age": "old"}}, r"row 1, field 'age': expected a number, got a string"),
        ({"set": {"age": True}}, r"row 1, field 'age': expected a number, got a boolean"),
        ({"set": {"age": 41.5}}, r"row 1, field 'age': expected an integer, got 41.5"),
        ({"set": {"income": "high"}}, r"row 1, field 'income': expected a number"),
        ({"set": {"plan": 3}}, r"row 1, field 'plan': expected a string"),
        ({"set": {"age": None}}, r"row 1, field 'age': is null, but the model needs a value"),
        ({"set": {"signup_date": None}}, r"row 1, field 'signup_date': is null"),
        ({"set": {"signup_date": "2019-13-45"}}, r"row 1, field 'signup_date': expected a date"),
        ({"set": {"income": -5.0}}, r"row 1, field 'income': log1p needs a value above -1"),
        ({"set": {"income": float("nan")}}, r"row 1, field 'income': expected a finite number"),
        ({"set": {"age": 2**40}}, r"row 1, field 'age': .* out of range"),
    ],
)
def test_bad_records_name_the_row_and_field(
    churn: Any, churn_records: list[dict[str, Any]], change: dict[str, Any], message: str
) -> None:
    bad = dict(churn_records[1])
    if "drop" in change:
        del bad[change["drop"]]
    bad.update(change.get("set", {}))
    with pytest.raises(InvalidInputError, match=message):
        churn.handler.decode({"records": [churn_records[0], bad]})


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"records": []}, r"field 'records': empty"),
        ({"rows": []}, r"field 'rows': empty"),
        ({}, r"body: send 'records' or 'rows'"),
        ({"records": [], "rows": []}, r"body: send 'records' or 'rows'"),
        ({"records": [{}], "extra": 1}, r"unknown field 'extra'"),
        ({"records": {"age": 1}}, r"field 'records': expected a list, got an object"),
        ({"records": ["x"]}, r"row 0: expected an object, got a string"),
        ({"rows": [[1, 2, 3]]}, r"row 0: expected 8 values \(age, income, .*\), got 3"),
        ({"rows": [{"age": 1}]}, r"row 0: expected a list of values, got an object"),
        ([1, 2], r"body: expected an object"),
    ],
)
def test_bad_bodies_are_refused(churn: Any, payload: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        churn.handler.decode(payload)


def test_too_many_rows_are_refused(churn: Any, churn_records: list[dict[str, Any]]) -> None:
    h = handler_for(churn.model_dir, max_request_items=3)
    assert len(h.decode({"records": churn_records[:3]})) == 3
    with pytest.raises(InvalidInputError, match=r"field 'records': 4 rows are over the limit of 3"):
        h.decode({"records": churn_records[:4]})
    with pytest.raises(InvalidInputError, match="max_request_items"):
        handler_for(churn.model_dir, max_request_items=0)
    with pytest.raises(InvalidInputError, match="backend: 'tpu'"):
        handler_for(churn.model_dir, backend="tpu")


def test_onnx_backend_matches_torch(churn: Any, churn_records: list[dict[str, Any]]) -> None:
    onnx = load_served_model("churn@champion", backend="onnx")
    assert onnx.handler.describe()["backend"] == "onnx"
    cached = churn.model_dir / "onnx" / "model.onnx"
    assert cached.is_file()  # exported once, beside the downloaded model version
    records = churn.handler.decode({"records": churn_records[:200]})
    inputs = churn.handler.encode_inputs(records)
    want, got = churn.handler.forward(inputs), onnx.handler.forward(inputs)
    assert got.dtype == np.float32 and np.abs(got - want).max() <= 1e-4
    torch_preds, onnx_preds = churn.handler.predict(records), onnx.handler.predict(records)
    assert [p["label"] for p in onnx_preds] == [p["label"] for p in torch_preds]
    # A second load reuses the cached file.
    before = cached.stat().st_mtime_ns
    load_served_model("churn@champion", backend="onnx")
    assert cached.stat().st_mtime_ns == before


# -- tabular: plain numeric features, standardized with the training statistics -----------


@pytest.fixture(scope="module")
def plain(module_workspace: Path) -> dict[str, Any]:
    from aifab.data import ingest
    from aifab.train.recipes.classify import main

    rng = np.random.default_rng(0)
    n = 300
    a = rng.normal(3, 2, n)
    b = rng.integers(0, 50, n)
    flag = rng.random(n) > 0.5
    table = pa.table({"a": a, "b": b, "flag": flag, "label": np.where(a + flag > 3.5, "hi", "lo")})
    path = module_workspace.parent / "plain.parquet"
    pq.write_table(table, path)
    ingest("plain", str(path))
    cfg = {"dataset": "plain@1", "label": "label", "features": ["a", "b", "flag"]}
    out = main({**cfg, "epochs": 2, "model": {"config": {"hidden": [8]}}, **FAST})
    return {"cfg": cfg, "model_dir": out["model_dir"]}


def test_plain_features_serve_exactly_the_training_logits(plain: dict[str, Any]) -> None:
    h = handler_for(plain["model_dir"])
    assert h.input_columns == ["a", "b", "flag"]
    records = raw_records("plain@1", h.input_columns)
    assert_no_skew(h, plain["model_dir"], plain["cfg"], records)
    with pytest.raises(InvalidInputError, match=r"row 0, field 'b': is null"):
        h.decode({"rows": [[1.0, None, True]]})
    with pytest.raises(InvalidInputError, match=r"row 0, field 'a': expected a number"):
        h.decode({"rows": [["1.0", 2, True]]})


# -- text: the tokenizer saved in the model directory --------------------------------------


@pytest.fixture(scope="module")
def text_model(module_workspace: Path) -> dict[str, Any]:
    from aifab.data import ingest
    from aifab.train.recipes.classify import main

    rng = random.Random(0)
    words = ["the", "a", "cat", "dog", "runs", "fast", "slow", "blue", "red", "green", "tree"]
    rows = []
    for i in range(120):
        text = [rng.choice(words) for _ in range(rng.randint(3, 6))]
        if i % 2 == 0:
            text.insert(rng.randrange(len(text) + 1), "excellent")
        rows.append({"review": " ".join(text), "label": "pos" if i % 2 == 0 else "neg"})
    rows[3]["review"] = None  # NULL text was tokenized as ""
    path = module_workspace.parent / "reviews.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    ingest("reviews", str(path))
    cfg = {"dataset": "reviews@1", "text_column": "review", "vocab_size": 300, "max_length": 16}
    model = {"d_model": 16, "layers": 1, "heads": 2, "dim_feedforward": 32, "dropout": 0.0}
    out = main({**cfg, "epochs": 1, "model": {"config": model}, **FAST})
    return {"cfg": cfg, "model_dir": out["model_dir"]}


def test_text_classifier_serves_exactly_the_training_logits(text_model: dict[str, Any]) -> None:
    h = handler_for(text_model["model_dir"])
    assert h.input_columns == ["review"] and h.modality == "text"
    assert h.describe()["input_columns"] == [{"name": "review", "type": "text"}]
    records = raw_records("reviews@1", h.input_columns)
    assert records[3]["review"] is None
    assert_no_skew(h, text_model["model_dir"], text_model["cfg"], records)
    with pytest.raises(InvalidInputError, match=r"row 0, field 'review': expected a string"):
        h.decode({"records": [{"review": 5}]})


# -- images: base64 files, and pixel columns ----------------------------------------------


@pytest.fixture(scope="module")
def image_model(module_workspace: Path) -> dict[str, Any]:
    from PIL import Image

    from aifab.data import ingest
    from aifab.train.recipes.classify import main

    root = module_workspace.parent / "shapes"
    for label, value in (("dark", 30), ("light", 220)):
        (root / label).mkdir(parents=True)
        for i in range(6):
            # RGB, not square and bigger than the model input: convert and resize matter.
            Image.new("RGB", (10, 12), color=(value + i, value - i, value)).save(
                root / label / f"{i}.png"
            )
    ingest("shapes", str(root))
    cfg = {"dataset": "shapes@1", "image_column": "path", "image_shape": [3, 8, 8]}
    out = main(
        {**cfg, "epochs": 1, "batch_size": 4, "model": {"config": {"channels": [4]}}, **FAST}
    )
    return {"cfg": cfg, "model_dir": out["model_dir"]}


def b64(path: str) -> str:
    return base64.b64encode(Path(path).read_bytes()).decode()


def test_image_classifier_serves_exactly_the_training_logits(image_model: dict[str, Any]) -> None:
    h = handler_for(image_model["model_dir"])
    assert h.describe()["input_columns"] == [{"name": "path", "type": "image"}]
    paths = [r["path"] for r in raw_records("shapes@1", ["path"])]
    records = [{"path": b64(p)} for p in paths]
    records[0]["path"] = "data:image/png;base64," + records[0]["path"]
    assert_no_skew(h, image_model["model_dir"], image_model["cfg"], records)
    # Records that skipped decode (plain base64 strings) encode the same.
    direct = h.encode_inputs([{"path": b64(p)} for p in paths])["x"]
    assert np.array_equal(direct, h.encode_inputs(h.decode({"records": records}))["x"])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not base64!", r"row 1, field 'path': not valid base64"),
        (base64.b64encode(b"plain text, not an image").decode(), r"not a readable image"),
        (12, r"row 1, field 'path': expected a base64-encoded image, got int"),
    ],
)
def test_bad_images_name_the_row(image_model: dict[str, Any], value: Any, message: str) -> None:
    h = handler_for(image_model["model_dir"])
    good = b64(raw_records("shapes@1", ["path"])[0]["path"])
    with pytest.raises(InvalidInputError, match=message):
        h.decode({"records": [{"path": good}, {"path": value}]})
    with pytest.raises(InvalidInputError, match=message.replace("row 1", "row 0")):
        h.encode_inputs([{"path": value}])


def test_pixel_columns_serve_exactly_the_training_logits(module_workspace: Path) -> None:
    from sklearn.datasets import load_digits

    from aifab.data import ingest
    from aifab.train.recipes.classify import main

    digits = load_digits()
    cols = {f"p{i}": digits.data[:300, i].astype("float32") for i in range(64)}
    path = module_workspace.parent / "digits.parquet"
    pq.write_table(pa.table({**cols, "digit": digits.target[:300]}), path)
    ingest("digits", str(path))
    cfg = {"dataset": "digits@1", "label": "digit", "image_shape": [1, 8, 8]}
    out = main({**cfg, "epochs": 1, "model": {"config": {"channels": [4]}}, **FAST})
    h = handler_for(out["model_dir"])
    assert h.modality == "image" and h.input_columns == [f"p{i}" for i in range(64)]
    records = raw_records("digits@1", h.input_columns)
    assert_no_skew(h, out["model_dir"], cfg, records)
