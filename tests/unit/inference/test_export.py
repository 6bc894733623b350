"""Export: ONNX / int8 ONNX / Triton from the quickstart churn model, checked against torch."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aifab.core.errors import InvalidInputError


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def exports(churn_model: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``churn@champion`` exported once in every format (default dirs, attached)."""
    from aifab.inference.export import export_model

    return {
        fmt: export_model("churn@champion", fmt, batch_size=16, repeats=3)
        for fmt in ("onnx", "onnx-int8", "triton")
    }


@pytest.fixture(scope="module")
def training(churn_model: dict[str, Any]) -> Any:
    """The churn model's data as the classify recipe made it (from the run's logged config)."""
    import tempfile

    from aifab.track import get_client
    from aifab.train.classification import load_data
    from aifab.train.recipes.classify import Config

    with tempfile.TemporaryDirectory() as tmp:
        path = get_client().download_artifacts(churn_model["run_id"], "config.json", tmp)
        cfg = Config.model_validate(json.loads(Path(path).read_text()))
    return load_data(cfg)


@pytest.fixture(scope="module")
def model(churn_model: dict[str, Any]) -> tuple[Path, Any, dict[str, Any]]:
    from aifab.models.checkpoint import load_model
    from aifab.track.registry import download_model

    model_dir = download_model("churn@champion")
    module, sidecar = load_model(model_dir)
    return model_dir, module, sidecar


def _test_inputs(training: Any) -> dict[str, np.ndarray]:
    rows = training.index["test"]
    return {k: v[rows] for k, v in training.inputs.items()}


def test_test_split_returns_the_training_test_rows(model: Any, training: Any) -> None:
    from aifab.inference.classifier import ClassifierHandler
    from aifab.inference.evaluation import test_split

    model_dir, _, sidecar = model
    records, labels = test_split(model_dir, sidecar)
    test_rows = training.index["test"]
    assert len(records) == len(test_rows) > 0
    assert labels == [training.classes[i] for i in training.labels[test_rows]]
    assert not {"label", "split", "label_source", "label_confidence"} & set(records[0])
    # Encoded for serving, the records are the very inputs training scored.
    handler = ClassifierHandler()
    handler.setup(model_dir, sidecar, {"backend": "torch", "max_request_items": len(records)})
    wanted = handler.input_columns
    checked = handler.decode({"records": [{c: r[c] for c in wanted} for r in records]})
    encoded = handler.encode_inputs(checked)
    json.dumps(records)  # JSON-ready, as a client would send them
    np.testing.assert_allclose(encoded["x"], training.inputs["x"][test_rows], atol=1e-6)


def test_onnx_export_matches_torch(exports: dict[str, Any], model: Any, training: Any) -> None:
    from aifab.inference.onnx_export import torch_logits
    from aifab.inference.onnx_runtime import OrtModel

    report = exports["onnx"]
    assert report["max_abs_diff"] <= 1e-4
    ort_model = OrtModel(Path(report["path"]) / "model.onnx", threads=1)
    inputs = _test_inputs(training)
    np.testing.assert_allclose(ort_model(inputs), torch_logits(model[1], inputs), atol=1e-4)
    # The batch axis is dynamic: one row and many rows both run.
    one = {k: v[:1] for k, v in inputs.items()}
    assert ort_model(one).shape == (1, len(training.classes))


def test_int8_is_smaller_and_mostly_agrees(exports: dict[str, Any], training: Any) -> None:
    from aifab.inference.onnx_runtime import OrtModel

    fp32, int8 = exports["onnx"], exports["onnx-int8"]
    assert int8["size_bytes"] < fp32["size_bytes"]
    inputs = _test_inputs(training)
    a = OrtModel(Path(fp32["path"]) / "model.onnx")(inputs).argmax(axis=1)
    b = OrtModel(Path(int8["path"]) / "model.onnx")(inputs).argmax(axis=1)
    assert np.mean(a == b) >= 0.9
    assert abs(int8["accuracy"]["delta"]) <= 0.05


def _parse_pbtxt(text: str) -> dict[str, Any]:
    """A small protobuf text-format reader: ``k: v``, ``k [ ... ]``, ``k { ... }``."""
    tokens = re.findall(r'"(?:[^"\\]|\\.)*"|[\[\]{}:,]|[^\s\[\]{}:,"]+', text)
    pos = 0

    def value() -> Any:
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok == "{":
            return fields("}")
        if tok == "[":
            items = []
            while tokens[pos] != "]":
                items.append(value())
                if tokens[pos] == ",":
                    pos += 1
            pos += 1
            return items
        if tok.startswith('"'):
            return json.loads(tok)
        return int(tok) if re.fullmatch(r"-?\d+", tok) else tok

    def fields(end: str | None) -> dict[str, Any]:
        nonlocal pos
        out: dict[str, Any] = {}
        while pos < len(tokens) and tokens[pos] != end:
            key = tokens[pos]
            pos += 1
            if tokens[pos] == ":":
                pos += 1
            out[key] = value()
        pos += 1
        return out

    return fields(None)


def test_triton_repository_layout(exports: dict[str, Any], model: Any) -> None:
    from aifab.inference.onnx_runtime import OrtModel

    report, sidecar = exports["triton"], model[2]
    root = Path(report["path"]) / "churn"
    assert (root / "1" / "model.onnx").is_file()
    config = _parse_pbtxt((root / "config.pbtxt").read_text())
    assert config["name"] == "churn"
    assert config["platform"] == "onnxruntime_onnx"
    assert config["max_batch_size"] == 256
    ort_model = OrtModel(root / "1" / "model.onnx")
    width = sidecar["config"]["in_features"]
    assert [i["name"] for i in config["input"]] == ort_model.input_names == ["x"]
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["input"][0]["dims"] == [width]
    (out,) = config["output"]
    assert out["name"] == "logits" and out["data_type"] == "TYPE_FP32"
    classes = sidecar["meta"]["preprocess"]["classes"]
    assert out["dims"] == [len(classes)]
    assert (root / out["label_filename"]).read_text().splitlines() == classes
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    assert "churn/config.pbtxt" in report["files"]


def test_report_fields(exports: dict[str, Any], workspace: Path) -> None:
    keys = {"model", "format", "path", "files", "size_bytes", "torch_size_bytes", "size_ratio"}
    keys |= {"latency_ms", "speedup", "max_abs_diff", "accuracy"}
    for fmt, report in exports.items():
        assert keys <= set(report)
        assert report["model"] == "churn@1" and report["format"] == fmt
        assert Path(report["path"]) == workspace / "exports" / "churn" / "v1" / fmt
        on_disk = json.loads((Path(report["path"]) / "report.json").read_text())
        assert on_disk == report
        files = [p for p in Path(report["path"]).rglob("*") if p.is_file()]
        assert sorted(report["files"]) == sorted(str(p.relative_to(report["path"])) for p in files)
        assert report["size_ratio"] == pytest.approx(
            report["size_bytes"] / report["torch_size_bytes"], rel=1e-3
        )
        assert set(report["latency_ms"]) == {"torch", "exported"}
        assert report["speedup"] > 0
        acc = report["accuracy"]
        assert acc["delta"] == pytest.approx(acc["exported"] - acc["torch"], abs=1e-6)
        assert 0.0 <= acc["torch"] <= 1.0 and report["test_rows"] > 0
    assert exports["onnx"]["accuracy"]["delta"] == 0.0


def test_exports_are_attached_to_the_version(
    exports: dict[str, Any], cli: Any, tmp_path: Path
) -> None:
    from aifab.track import get_client, resolve_model

    mv = resolve_model("churn@champion")
    for fmt, report in exports.items():
        assert mv["tags"][f"aifab.export.{fmt}"] == report["artifact_uri"]
        assert report["artifact_uri"] == f"runs:/{mv['run_id']}/exports/{fmt}"
    listed = {a.path for a in get_client().list_artifacts(mv["run_id"], "exports/onnx")}
    assert {"exports/onnx/model.onnx", "exports/onnx/report.json"} <= listed
    fetched = get_client().download_artifacts(mv["run_id"], "exports/onnx/model.onnx", tmp_path)
    local = Path(exports["onnx"]["path"]) / "model.onnx"
    assert Path(fetched).read_bytes() == local.read_bytes()
    shown = cli("models", "show", "churn@champion", "--json")
    assert shown.exit_code == 0
    assert json.loads(shown.stdout)["tags"]["aifab.export.triton"].endswith("exports/triton")


def test_cli_export_json_and_table(exports: dict[str, Any], cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "edge"
    args = ["churn@1", "--format", "onnx-int8", "--out", out, "--no-attach", "--json"]
    result = cli("models", "export", *args)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["path"] == str(out) and (out / "model.onnx").is_file()
    assert "artifact_uri" not in report
    # Exporting again into the same directory replaces the earlier export.
    table = cli("models", "export", "churn@1", "-f", "onnx-int8", "--out", out, "--no-attach")
    assert table.exit_code == 0, table.stderr
    assert "churn@1 -> onnx-int8" in table.stdout and "accuracy" in table.stdout


def test_cli_errors_are_one_line(exports: dict[str, Any], cli: Any, tmp_path: Path) -> None:
    for args, needle in [
        (("nosuch@1",), "model 'nosuch'"),
        (("churn@9",), "no version 9"),
        (("churn@1", "--format", "tflite"), "format 'tflite'"),
    ]:
        result = cli("models", "export", *args)
        assert result.exit_code != 0
        assert result.stderr.count("\n") == 1 and needle in result.stderr
        assert "Traceback" not in result.stderr
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine")
    result = cli("models", "export", "churn@1", "--out", occupied, "--no-attach")
    assert result.exit_code != 0 and "not an export directory" in result.stderr
    assert (occupied / "notes.txt").read_text() == "mine"


def test_export_rejects_a_language_model(tiny_lm: dict[str, Any], cli: Any) -> None:
    from aifab.inference.export import export_model

    with pytest.raises(InvalidInputError, match=r"export supports classifiers \(mlp, cnn, "):
        export_model("tiny-lm@1", "onnx")
    result = cli("models", "export", "tiny-lm@1", "--format", "onnx")
    assert result.exit_code == 2
    assert "tiny-lm@1 is a causal-lm: export supports classifiers" in result.stderr


def test_export_without_a_test_split_reports_why(churn_model: Any, tmp_path: Path) -> None:
    from aifab.inference.export import export_model
    from aifab.models.checkpoint import save_model
    from aifab.models.zoo import build_model
    from aifab.track import register_model, start_run

    config = {"in_features": 3, "hidden": [4], "out_features": 2}
    pre = {"modality": "tabular", "label": "y", "classes": ["a", "b"], "features": ["f"]}
    module = build_model("mlp", config)
    model_dir = save_model(
        tmp_path / "m", module, builder="mlp", config=config, meta={"preprocess": pre}
    )
    with start_run("export-test", system_metrics=False) as run:
        run.log_artifacts(model_dir, "model")
    register_model(run.id, "model", "no-lineage")
    report = export_model("no-lineage@1", "triton", attach=False)
    assert report["accuracy"] is None and report["test_rows"] == 0
    assert "meta.datasets" in report["notes"][0]
    assert report["max_abs_diff"] <= 1e-4


@pytest.mark.parametrize(
    ("builder", "config", "meta"),
    [
        ("cnn", {"in_channels": 1, "image_size": 8, "num_classes": 3}, {}),
        (
            "transformer-classifier",
            {"vocab_size": 50, "num_classes": 2, "max_len": 12, "layers": 1},
            {"preprocess": {"max_length": 12}},
        ),
    ],
)
def test_zoo_classifiers_export_with_a_dynamic_batch(
    builder: str, config: dict[str, Any], meta: dict[str, Any], tmp_path: Path
) -> None:
    from aifab.inference.onnx_export import quantize_int8, sample_inputs, to_onnx, torch_logits
    from aifab.inference.onnx_runtime import OrtModel
    from aifab.models.zoo import build_model

    module = build_model(builder, config).eval()
    sidecar = {"builder": builder, "config": config, "meta": meta}
    path = to_onnx(module, sample_inputs(sidecar, 1), tmp_path / "m.onnx")
    ort_model = OrtModel(path, threads=1)
    for batch in (1, 5):
        inputs = sample_inputs(sidecar, batch, seed=batch)
        if "attention_mask" in inputs:
            inputs["attention_mask"][:, 8:] = 0  # padded tails must be masked the same way
        np.testing.assert_allclose(ort_model(inputs), torch_logits(module, inputs), atol=1e-4)
    int8 = OrtModel(quantize_int8(path, tmp_path / "q.onnx"))
    assert int8(sample_inputs(sidecar, 3)).shape == (3, 3 if builder == "cnn" else 2)


def test_ort_model_bad_files_and_inputs(tmp_path: Path) -> None:
    from aifab.inference.onnx_export import sample_inputs, to_onnx
    from aifab.inference.onnx_runtime import OrtModel
    from aifab.models.zoo import build_model

    with pytest.raises(InvalidInputError, match="missing"):
        OrtModel(tmp_path / "none.onnx")
    (tmp_path / "bad.onnx").write_bytes(b"not a model")
    with pytest.raises(InvalidInputError, match="cannot load the ONNX model"):
        OrtModel(tmp_path / "bad.onnx")
    sidecar = {"builder": "mlp", "config": {"in_features": 4, "out_features": 2, "hidden": [8]}}
    path = to_onnx(build_model("mlp", sidecar["config"]), sample_inputs(sidecar), tmp_path / "a")
    with pytest.raises(InvalidInputError, match="input 'x' missing"):
        OrtModel(path)({"y": np.zeros((1, 4), np.float32)})
    with pytest.raises(InvalidInputError, match="export supports classifiers"):
        sample_inputs({"builder": "rotate", "config": {}})
