"""The model zoo: config validation, listing without torch, building, and the zoo command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import typer
from typer.testing import CliRunner

from aifab.cli.models_zoo import register_zoo
from aifab.core.errors import InvalidInputError
from aifab.models.zoo import CausalLMConfig, build_model, list_zoo, model_config

NAMES = {
    "mlp",
    "cnn",
    "transformer-classifier",
    "fusion-classifier",
    "dual-encoder",
    "causal-lm",
    "rotate",
    "transe",
}


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_list_zoo_names_tasks_and_fields():
    zoo = {m["name"]: m for m in list_zoo()}
    assert set(zoo) == NAMES
    assert zoo["cnn"]["task"] == "image"
    assert zoo["rotate"]["task"] == "kg"
    fields = {f["name"]: f for f in zoo["mlp"]["fields"]}
    assert fields["hidden"]["type"] == "list[int]"
    assert fields["hidden"]["default"] == [128, 64]
    assert fields["activation"]["type"] == "Literal['relu', 'gelu', 'tanh', 'silu']"
    assert fields["dropout"]["description"]
    rotate = {f["name"]: f for f in zoo["rotate"]["fields"]}
    assert rotate["num_entities"]["required"] is True
    assert rotate["dim"]["required"] is False
    json.dumps(list_zoo())  # the CLI prints it as JSON


def test_listing_the_zoo_does_not_import_torch():
    code = (
        "import sys; from aifab.models import list_zoo; list_zoo(); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_model_config_names_the_bad_key():
    with pytest.raises(InvalidInputError, match=r"model config \(mlp\): hiden: unknown key"):
        model_config("mlp", {"hiden": [8]})
    with pytest.raises(InvalidInputError, match=r"dropout: Input should be less than 1"):
        model_config("cnn", {"dropout": 1.5})
    with pytest.raises(InvalidInputError, match=r"heads: .*heads \(3\) must divide d_model \(64\)"):
        model_config("transformer-classifier", {"heads": 3})
    with pytest.raises(InvalidInputError, match=r"kv_heads: .*must divide heads"):
        model_config("causal-lm", {"heads": 4, "kv_heads": 3})
    with pytest.raises(InvalidInputError, match=r"num_entities: Field required"):
        model_config("rotate", {"num_relations": 2})
    with pytest.raises(InvalidInputError, match=r"unknown model 'mlpp' \(known: causal-lm, cnn"):
        build_model("mlpp", {})


def test_causal_lm_presets_fill_defaults_and_explicit_keys_win():
    small = model_config("causal-lm", {"preset": "small", "vocab_size": 1000})
    assert isinstance(small, CausalLMConfig)
    assert (small.hidden_size, small.layers, small.vocab_size) == (384, 6, 1000)
    with torch.device("meta"):  # sizes only: no memory, no init time
        tiny = n_params(build_model("causal-lm", {}))
        small = n_params(build_model("causal-lm", {"preset": "small"}))
    assert 100_000 <= tiny <= 1_000_000
    assert small >= 10_000_000


def test_each_model_builds_and_maps_inputs_to_outputs():
    torch.manual_seed(0)
    mlp = build_model("mlp", {"in_features": 5, "hidden": [8], "out_features": 3, "dropout": 0.1})
    assert mlp(torch.randn(4, 5)).shape == (4, 3)
    cnn = build_model("cnn", {"in_channels": 3, "image_size": 28, "channels": [4, 8, 8, 8, 8]})
    assert cnn(torch.randn(2, 3, 28, 28)).shape == (2, 10)  # pooling stops at 1x1

    clf = build_model("transformer-classifier", {"num_classes": 3, "max_len": 16}).eval()
    ids = torch.randint(1, 512, (3, 10))
    ids[1, 4:] = 0
    ids[2] = 0  # all padding: still finite
    logits = clf(ids)
    assert logits.shape == (3, 3) and torch.isfinite(logits).all()
    # Padding does not change a sequence's prediction.
    assert torch.allclose(clf(ids[1:2, :4]), logits[1:2], atol=1e-5)
    with pytest.raises(ValueError, match="exceeds max_len 16"):
        clf(torch.ones(1, 17, dtype=torch.long))

    lm = build_model("causal-lm", {})
    assert lm(torch.randint(0, 512, (2, 7))).logits.shape == (2, 7, 512)
    kg = build_model("rotate", {"num_entities": 7, "num_relations": 2, "dim": 4})
    assert kg(torch.tensor([[0, 1, 2], [3, 0, 4]])).shape == (2,)


def test_cnn_learns_sklearn_digits():
    from sklearn.datasets import load_digits

    torch.manual_seed(0)
    x, y = load_digits(return_X_y=True)
    images = torch.tensor(x / 16.0, dtype=torch.float32).view(-1, 1, 8, 8)
    labels = torch.tensor(y)
    order = torch.randperm(len(labels))
    train, test = order[:1400], order[1400:]
    model = build_model("cnn", {})
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(4):
        perm = train[torch.randperm(len(train))]
        for i in range(0, len(perm), 64):
            idx = perm[i : i + 64]
            loss = torch.nn.functional.cross_entropy(model(images[idx]), labels[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(images[test]).argmax(1) == labels[test]).float().mean().item()
    assert accuracy >= 0.97


def test_zoo_command_lists_models_and_fields():
    # The lead wires this into ``aifab models``; here a stand-in group holds it.
    models_app = typer.Typer()
    register_zoo(models_app)
    app = typer.Typer()
    app.add_typer(models_app, name="models")
    runner = CliRunner()
    r = runner.invoke(app, ["models", "zoo", "--json"])
    assert r.exit_code == 0, r.output
    assert {m["name"] for m in json.loads(r.stdout)} == NAMES
    r = runner.invoke(app, ["models", "zoo"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "transformer-classifier" in r.stdout
    r = runner.invoke(app, ["models", "zoo", "causal-lm"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "kv_heads" in r.stdout and "preset" in r.stdout
    r = runner.invoke(app, ["models", "zoo", "rotate", "--json"])
    assert json.loads(r.stdout)["name"] == "rotate"
    r = runner.invoke(app, ["models", "zoo", "nope"])
    assert r.exit_code != 0 and "unknown model 'nope'" in str(r.exception)
