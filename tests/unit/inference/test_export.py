"""Export: ONNX / int8 ONNX / Triton from the quickstart churn model, checked against torch."""

from __future__ import annotations

import json
import re
import sys
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
def ensemble(exports: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``churn@champion`` as a Triton ensemble with a Python preprocessing step, for a GPU."""
    from aifab.inference.export import export_model

    out = tmp_path_factory.mktemp("ensemble") / "repo"
    return export_model(
        "churn@champion",
        "triton",
        out_dir=out,
        attach=False,
        batch_size=8,
        repeats=2,
        target="gpu",
        preprocess="python",
    )


@pytest.fixture(scope="module")
def quickstart_rows(churn_model: dict[str, Any]) -> tuple[list[dict[str, Any]], list[Any]]:
    """Every row of the quickstart's split dataset as a request record, and what ``/v1/predict``
    answers for it (the in-process handler serving uses)."""
    from aifab.data import head
    from aifab.inference.loading import shared_model

    handler = shared_model("churn@champion").handler
    table = head("customers_split", 100_000)
    wanted = handler.input_columns
    records = [
        {c: (v.isoformat() if hasattr(v, "isoformat") else v) for c, v in r.items() if c in wanted}
        for r in table.to_pylist()
    ]
    predictions = handler.predict(handler.decode({"records": records}))
    return records, predictions


def _probabilities(predictions: list[dict[str, Any]], classes: list[str]) -> np.ndarray:
    return np.array([[p["probabilities"][c] for c in classes] for p in predictions])


def _raw_session(path: Path) -> Any:
    """The export in plain onnxruntime, as a user would load it."""
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def _raw_feeds(session: Any, records: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """One array per graph input from the records: strings ("" for missing) or float32."""
    feeds = {}
    for arg in session.get_inputs():
        values = [r.get(arg.name) for r in records]
        if arg.type == "tensor(string)":
            feeds[arg.name] = np.array(["" if v is None else v for v in values], dtype=object)
        else:
            feeds[arg.name] = np.array(values, dtype=np.float32)
    return feeds


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


def test_onnx_export_takes_raw_records_and_answers_as_predict(
    exports: dict[str, Any], quickstart_rows: Any, model: Any
) -> None:
    records, predictions = quickstart_rows
    classes = model[2]["meta"]["preprocess"]["classes"]
    session = _raw_session(Path(exports["onnx"]["path"]) / "model.onnx")
    names = [i.name for i in session.get_inputs()]
    assert names == [
        "age", "income", "monthly_spend", "support_tickets", "plan", "country", "signup_date",
        "ticket_text",
    ]  # fmt: skip
    types = {i.name: i.type for i in session.get_inputs()}
    assert types["age"] == "tensor(float)" and types["ticket_text"] == "tensor(string)"
    assert len(records) > 500 and any(r["country"] is None for r in records)
    probs, labels, logits = session.run(
        ["probabilities", "label", "logits"], _raw_feeds(session, records)
    )
    np.testing.assert_allclose(probs, _probabilities(predictions, classes), atol=1e-5, rtol=0)
    assert list(labels) == [p["label"] for p in predictions]
    assert logits.shape == (len(records), len(classes))
    # The batch axis is dynamic: one row runs on its own and answers the same.
    one = session.run(["probabilities"], _raw_feeds(session, records[:1]))[0]
    np.testing.assert_allclose(one[0], probs[0], atol=1e-6)
    report = exports["onnx"]
    assert report["inputs"] == "raw" and report["preprocess"] == "graph"
    assert report["compared"] == "probabilities" and report["max_abs_diff"] <= 1e-5
    assert report["within_tolerance"] is True


def test_onnx_metadata_names_classes_features_and_inputs(
    exports: dict[str, Any], model: Any
) -> None:
    from aifab.inference.onnx_bundle import read_metadata

    pre = model[2]["meta"]["preprocess"]
    for fmt in ("onnx", "onnx-int8"):
        meta = read_metadata(Path(exports[fmt]["path"]) / "model.onnx")
        assert meta["aifab.classes"] == pre["classes"]
        assert meta["aifab.features"] == pre["features"]
        assert meta["aifab.model"] == "churn@1" and meta["aifab.preprocess"] == "graph"
        assert meta["aifab.outputs"] == ["probabilities", "label", "logits"]
        fields = {f["name"]: f for f in meta["aifab.inputs"]}
        assert fields["country"] == {"name": "country", "type": "string", "nullable": True}
        assert fields["age"]["type"] == "number" and not fields["age"]["nullable"]


def test_int8_is_smaller_and_within_its_tolerance(
    exports: dict[str, Any], quickstart_rows: Any, model: Any
) -> None:
    from aifab.inference.export import TOLERANCE

    records, predictions = quickstart_rows
    classes = model[2]["meta"]["preprocess"]["classes"]
    fp32, int8 = exports["onnx"], exports["onnx-int8"]
    assert int8["size_bytes"] < fp32["size_bytes"]
    session = _raw_session(Path(int8["path"]) / "model.onnx")
    probs, labels = session.run(["probabilities", "label"], _raw_feeds(session, records))
    ref = _probabilities(predictions, classes)
    assert np.max(np.abs(probs - ref)) <= TOLERANCE["onnx-int8"]
    assert np.mean(np.asarray(labels) == [p["label"] for p in predictions]) >= 0.95
    assert abs(int8["accuracy"]["delta"]) <= 0.05
    assert int8["max_abs_diff"] <= TOLERANCE["onnx-int8"] and int8["within_tolerance"]


def _parse_pbtxt(text: str) -> dict[str, Any]:
    """A small protobuf text-format reader: ``k: v``, ``k [ ... ]``, ``k { ... }``, ``# ...``.

    A repeated field written as several ``k { ... }`` blocks (``input_map``) becomes a dict of
    their ``key`` -> ``value``.
    """
    found = re.findall(r'"(?:[^"\\]|\\.)*"|#[^\n]*|[\[\]{}:,]|[^\s\[\]{}:,"#]+', text)
    tokens = [t for t in found if not t.startswith("#")]  # comments
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
            got = value()
            if isinstance(got, dict) and set(got) == {"key", "value"}:  # a map entry
                out.setdefault(key, {})[got["key"]] = got["value"]
            else:
                out[key] = got
        pos += 1
        return out

    return fields(None)


def test_triton_repository_takes_raw_fields(exports: dict[str, Any], model: Any) -> None:
    report, sidecar = exports["triton"], model[2]
    root = Path(report["path"]) / "churn"
    assert (root / "1" / "model.onnx").is_file()
    config = _parse_pbtxt((root / "config.pbtxt").read_text())
    assert config["name"] == "churn"
    assert config["platform"] == "onnxruntime_onnx"
    assert config["max_batch_size"] == 256
    session = _raw_session(root / "1" / "model.onnx")
    inputs = {i["name"]: i for i in config["input"]}
    assert list(inputs) == [i.name for i in session.get_inputs()]
    assert inputs["ticket_text"]["data_type"] == "TYPE_STRING"
    assert inputs["age"]["data_type"] == "TYPE_FP32"
    # (batch,) graph inputs: [1] to Triton, reshaped away for the model.
    assert inputs["age"]["dims"] == [1] and inputs["age"]["reshape"] == {"shape": []}
    probs, label, logits = config["output"]
    classes = sidecar["meta"]["preprocess"]["classes"]
    assert probs["name"] == "probabilities" and probs["dims"] == [len(classes)]
    assert (root / probs["label_filename"]).read_text().splitlines() == classes
    assert label["name"] == "label" and label["data_type"] == "TYPE_STRING"
    assert logits["name"] == "logits"
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    assert "churn/config.pbtxt" in report["files"] and report["target"] == "cpu"


def test_triton_ensemble_for_a_gpu_runs_aifab_preprocessing(
    ensemble: dict[str, Any], quickstart_rows: Any, model: Any
) -> None:
    repo = Path(ensemble["path"])
    assert ensemble["preprocess"] == "python" and ensemble["target"] == "gpu"
    top = _parse_pbtxt((repo / "churn" / "config.pbtxt").read_text())
    pre = _parse_pbtxt((repo / "churn_preprocess" / "config.pbtxt").read_text())
    net = _parse_pbtxt((repo / "churn_network" / "config.pbtxt").read_text())
    assert top["platform"] == "ensemble" and (repo / "churn" / "1").is_dir()
    assert pre["backend"] == "python" and pre["instance_group"][0]["kind"] == "KIND_CPU"
    assert net["platform"] == "onnxruntime_onnx" and net["instance_group"][0]["kind"] == "KIND_GPU"
    first, second = top["ensemble_scheduling"]["step"]
    assert first["model_name"] == "churn_preprocess" and second["model_name"] == "churn_network"
    assert [i["name"] for i in top["input"]] == [i["name"] for i in pre["input"]] == [
        "age", "income", "monthly_spend", "support_tickets", "plan", "country", "signup_date",
        "ticket_text",
    ]  # fmt: skip
    # The ensemble's tensors connect: what preprocessing writes is what the network reads.
    assert first["output_map"] == second["input_map"]
    assert [o["name"] for o in pre["output"]] == [i["name"] for i in net["input"]] == ["x"]
    assert (repo / "churn_preprocess" / "1" / "feature_transform.json").is_file()
    assert not (repo / "churn_preprocess" / "1" / "model.safetensors").exists()
    assert ensemble["max_abs_diff"] <= 1e-5 and ensemble["inputs"] == "raw"


class _StandInTensor:
    """Stand-in for ``triton_python_backend_utils.Tensor`` (Triton cannot run here)."""

    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class _StandInRequest:
    def __init__(self, tensors: dict[str, np.ndarray]) -> None:
        self.tensors = {k: _StandInTensor(k, v) for k, v in tensors.items()}


class _StandInResponse:
    def __init__(self, output_tensors: list[_StandInTensor], error: Any = None) -> None:
        self.outputs = {t.name(): t.as_numpy() for t in output_tensors}
        self.error = error


def _stand_in_pb_utils() -> Any:
    """A small stand-in for Triton's ``triton_python_backend_utils`` module."""
    import types

    module = types.ModuleType("triton_python_backend_utils")
    module.Tensor = _StandInTensor  # type: ignore[attr-defined]
    module.InferenceResponse = _StandInResponse  # type: ignore[attr-defined]
    module.TritonError = RuntimeError  # type: ignore[attr-defined]
    module.get_input_tensor_by_name = lambda request, name: request.tensors.get(name)  # type: ignore[attr-defined]
    return module


def _triton_request(config: dict[str, Any], records: list[dict[str, Any]]) -> _StandInRequest:
    """Request tensors as Triton hands them over: (batch, 1), strings as UTF-8 bytes."""
    tensors = {}
    for spec in config["input"]:
        values = [r.get(spec["name"]) for r in records]
        if spec["data_type"] == "TYPE_STRING":
            data = [("" if v is None else v).encode("utf-8") for v in values]
            tensors[spec["name"]] = np.array(data, dtype=object).reshape(-1, 1)
        else:
            tensors[spec["name"]] = np.array(values, dtype=np.float32).reshape(-1, 1)
    return _StandInRequest(tensors)


def test_triton_python_step_matches_predict(
    ensemble: dict[str, Any], quickstart_rows: Any, model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", _stand_in_pb_utils())
    root = Path(ensemble["path"]) / "churn_preprocess"
    spec = importlib.util.spec_from_file_location("churn_preprocess_model", root / "1" / "model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = _parse_pbtxt((root / "config.pbtxt").read_text())
    step = module.TritonPythonModel()
    step.initialize(
        {"model_repository": str(root), "model_version": "1", "model_config": json.dumps(config)}
    )
    records, predictions = quickstart_rows
    batches = [records[i : i + 256] for i in range(0, len(records), 256)]
    responses = step.execute([_triton_request(config, b) for b in batches])
    assert all(r.error is None for r in responses)
    x = np.concatenate([r.outputs["x"] for r in responses])
    session = _raw_session(Path(ensemble["path"]) / "churn_network" / "1" / "model.onnx")
    probs = session.run(["probabilities"], {"x": x})[0]
    classes = model[2]["meta"]["preprocess"]["classes"]
    np.testing.assert_allclose(probs, _probabilities(predictions, classes), atol=1e-5, rtol=0)
    # A bad request gets an error naming the field; the good one in the same batch still runs.
    bad = dict(records[0], signup_date="yesterday")
    missing = {k: v for k, v in records[0].items() if k != "age"}
    out = step.execute([_triton_request(config, [bad]), _triton_request(config, records[:2])])
    assert "signup_date" in str(out[0].error) and out[1].error is None
    assert out[1].outputs["x"].shape == (2, x.shape[1])
    no_age = {s["name"]: s for s in config["input"] if s["name"] != "age"}
    (response,) = step.execute([_triton_request({"input": list(no_age.values())}, [missing])])
    assert "age" in str(response.error)


def test_report_fields(exports: dict[str, Any], workspace: Path) -> None:
    keys = {"model", "format", "path", "files", "size_bytes", "torch_size_bytes", "size_ratio"}
    keys |= {"latency_ms", "latency", "speedup", "max_abs_diff", "accuracy", "tolerance"}
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
        # Like for like: raw records -> probabilities on both sides, same batches and threads.
        assert report["latency_path"] == "raw records -> probabilities"
        assert set(report["latency"]) == {"1", "16"}
        for figures in report["latency"].values():
            assert figures["handler_ms"] > 0 and figures["exported_ms"] > 0
            assert figures["threads"] == 1  # the handler runs torch on one thread up to 64 rows
        assert report["latency_ms"] == {
            "handler": report["latency"]["16"]["handler_ms"],
            "exported": report["latency"]["16"]["exported_ms"],
        }
        assert report["speedup"] > 0
        acc = report["accuracy"]
        assert acc["delta"] == pytest.approx(acc["exported"] - acc["handler"], abs=1e-6)
        assert 0.0 <= acc["handler"] <= 1.0 and report["test_rows"] > 0
    assert exports["onnx"]["accuracy"]["delta"] == 0.0


def test_exported_files_are_readable_by_another_user(
    exports: dict[str, Any], ensemble: dict[str, Any]
) -> None:
    import stat

    for report in [*exports.values(), ensemble]:
        root = Path(report["path"])
        paths = [root, *root.rglob("*")]
        assert len(paths) > 3
        for path in paths:
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode == (0o755 if path.is_dir() else 0o644), (path, oct(mode))


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
        (("churn@1", "--target", "tpu"), "target 'tpu'"),
        (("churn@1", "--preprocess", "python"), "use it with triton"),
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
    from aifab.inference.onnx_bundle import read_metadata
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
    assert report["max_abs_diff"] <= 1e-4 and report["compared"] == "logits"
    # Its one feature column holds lists: no ONNX form, so Triton gets the Python ensemble.
    assert report["preprocess"] == "python" and report["inputs"] == "raw"
    assert "list-valued feature columns" in report["notes"][1]
    assert "no-lineage_preprocess/1/model.py" in report["files"]
    with pytest.raises(InvalidInputError, match="cannot put the preprocessing in the graph: list"):
        export_model("no-lineage@1", "onnx", attach=False, preprocess="graph")
    # As ONNX it keeps encoded inputs (aifab's encoder outside), and says so.
    plain = export_model("no-lineage@1", "onnx", attach=False)
    assert plain["inputs"] == "encoded" and plain["preprocess"] == "aifab"
    assert "aifab's encoder" in plain["notes"][1]
    onnx_file = Path(plain["path"]) / "model.onnx"
    assert [i.name for i in _raw_session(onnx_file).get_inputs()] == ["x"]
    meta = read_metadata(onnx_file)
    assert meta["aifab.preprocess"] == "aifab" and meta["aifab.classes"] == ["a", "b"]
    assert meta["aifab.features"] == ["f"] and "aifab.inputs" not in meta


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
