"""Model directories: save/load round trips for every zoo model, HF base models, bad dirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from aifab.core.errors import ConflictError, InvalidInputError
from aifab.models.checkpoint import load_model, read_sidecar, save_model
from aifab.models.tokenizer import train_bpe_tokenizer
from aifab.models.zoo import build_model, model_config

KG = {"num_entities": 9, "num_relations": 3, "dim": 4}
CASES = {
    "mlp": ({"in_features": 6, "hidden": [8], "out_features": 3}, lambda: torch.randn(4, 6)),
    "cnn": ({"channels": [4, 8]}, lambda: torch.randn(3, 1, 8, 8)),
    "transformer-classifier": ({"max_len": 12}, lambda: torch.randint(0, 512, (2, 12))),
    "rotate": (KG, lambda: torch.tensor([[0, 1, 2], [8, 2, 3]])),
    "transe": ({**KG, "p_norm": 2}, lambda: torch.tensor([[0, 1, 2], [8, 2, 3]])),
    "causal-lm": ({}, lambda: torch.randint(0, 512, (2, 9))),
}


def outputs(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out = model(x)
    return getattr(out, "logits", out)


@pytest.mark.parametrize("name", list(CASES))
def test_round_trip_gives_identical_outputs(name: str, tmp_path: Path):
    config, make_input = CASES[name]
    torch.manual_seed(0)
    model = build_model(name, config)
    model(make_input())  # train-mode pass: moves BatchNorm running stats off their defaults
    model.eval()
    x = make_input()
    meta = {"datasets": ["digits@2"], "run_id": "abc123"}
    path = save_model(tmp_path / "m", model, builder=name, config=config, meta=meta)

    loaded, sidecar = load_model(path)
    assert type(loaded) is type(model) and not loaded.training
    assert torch.equal(outputs(loaded, x), outputs(model, x))
    assert sidecar["builder"] == name and sidecar["meta"] == meta
    assert sidecar["config"] == model_config(name, config).model_dump()
    assert sidecar["num_parameters"] == sum(p.numel() for p in model.parameters())
    assert read_sidecar(path) == sidecar
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # no temp dirs left


def test_causal_lm_is_a_hugging_face_directory_with_its_tokenizer(tmp_path: Path):
    from transformers import AutoModelForCausalLM

    tok = train_bpe_tokenizer(["hello world, hello tokens"] * 5, vocab_size=300)
    model = build_model("causal-lm", {"vocab_size": len(tok)}).eval()
    path = save_model(
        tmp_path / "lm", model, builder="causal-lm", config={"vocab_size": len(tok)}, tokenizer=tok
    )
    assert {"config.json", "model.safetensors", "tokenizer.json", "aifab-model.json"} <= {
        p.name for p in path.iterdir()
    }
    loaded, sidecar = load_model(path)
    assert sidecar["tokenizer"] is True and sidecar["task"] == "lm"
    # Tied embeddings stay tied after loading.
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
    hf = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    x = torch.tensor([tok.encode("hello world")])
    assert torch.equal(outputs(hf, x), outputs(model, x))


def test_plain_hugging_face_directory_loads_as_a_base_model(tmp_path: Path):
    model = build_model("causal-lm", {}).eval()
    model.save_pretrained(tmp_path / "base")
    loaded, sidecar = load_model(tmp_path / "base")
    assert sidecar["base"] is True and sidecar["builder"] == "hf-causal-lm"
    assert sidecar["config"]["hidden_size"] == 64
    x = torch.randint(0, 512, (1, 5))
    assert torch.equal(outputs(loaded, x), outputs(model, x))


def test_replacing_an_existing_model_directory(tmp_path: Path):
    torch.manual_seed(0)
    first = build_model("mlp", {})
    second = build_model("mlp", {})
    save_model(tmp_path / "m", first, builder="mlp", config={})
    save_model(tmp_path / "m", second, builder="mlp", config={}, meta={"epoch": 2})
    loaded, sidecar = load_model(tmp_path / "m")
    assert sidecar["meta"] == {"epoch": 2}
    assert torch.equal(loaded[0].weight, second[0].weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    with pytest.raises(ConflictError, match="exists and is not a model directory"):
        save_model(tmp_path / "notes", first, builder="mlp", config={})
    assert (tmp_path / "notes" / "todo.txt").read_text() == "keep me"


def test_bad_save_arguments(tmp_path: Path):
    model = build_model("mlp", {})
    with pytest.raises(InvalidInputError, match=r"model config \(mlp\): hiden: unknown key"):
        save_model(tmp_path / "m", model, builder="mlp", config={"hiden": [3]})
    with pytest.raises(InvalidInputError, match="meta: not JSON-serialisable"):
        save_model(tmp_path / "m", model, builder="mlp", config={}, meta={"x": object()})
    assert not (tmp_path / "m").exists()
    assert list(tmp_path.iterdir()) == []


def test_not_a_model_directory(tmp_path: Path):
    with pytest.raises(InvalidInputError, match="is not a model directory: it does not exist"):
        load_model(tmp_path / "nope")
    with pytest.raises(
        InvalidInputError, match="is not a model directory: no aifab-model.json or config.json"
    ):
        load_model(tmp_path)
    with pytest.raises(InvalidInputError, match="is not a model directory: no aifab-model.json"):
        read_sidecar(tmp_path)


@pytest.fixture
def saved_mlp(tmp_path: Path) -> Path:
    return save_model(tmp_path / "m", build_model("mlp", {}), builder="mlp", config={})


def test_missing_or_corrupt_files_are_named(saved_mlp: Path):
    weights, sidecar = saved_mlp / "model.safetensors", saved_mlp / "aifab-model.json"
    good = sidecar.read_text()

    sidecar.write_text("{not json")
    with pytest.raises(InvalidInputError, match=r"aifab-model.json: corrupt sidecar"):
        load_model(saved_mlp)
    sidecar.write_text(json.dumps({"builder": "mlp"}))
    with pytest.raises(InvalidInputError, match=r"corrupt sidecar \(no 'config'\)"):
        load_model(saved_mlp)
    sidecar.write_text(json.dumps({**json.loads(good), "builder": "resnet"}))
    with pytest.raises(InvalidInputError, match=r"aifab-model.json: unknown model 'resnet'"):
        load_model(saved_mlp)
    sidecar.write_text(json.dumps({**json.loads(good), "config": {"hidden": [7]}}))
    with pytest.raises(InvalidInputError, match=r"model.safetensors: weights do not fit the model"):
        load_model(saved_mlp)
    sidecar.write_text(good)

    weights.write_bytes(weights.read_bytes()[:40])
    with pytest.raises(InvalidInputError, match=r"model.safetensors: corrupt weights file"):
        load_model(saved_mlp)
    weights.unlink()
    with pytest.raises(InvalidInputError, match=r"weights file model.safetensors is missing"):
        load_model(saved_mlp)


def test_broken_hugging_face_directory(tmp_path: Path):
    build_model("causal-lm", {}).save_pretrained(tmp_path / "lm")
    weights = tmp_path / "lm" / "model.safetensors"
    weights.write_bytes(b"garbage")
    with pytest.raises(InvalidInputError, match="cannot load the causal LM"):
        load_model(tmp_path / "lm")
    weights.unlink()
    with pytest.raises(InvalidInputError, match="weights file missing"):
        load_model(tmp_path / "lm")
