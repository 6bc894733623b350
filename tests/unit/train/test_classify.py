"""The classify recipe end to end (tabular, image pixels, text, feature specs), its tracking and
registry side, model lineage, and the custom recipe. One workspace (and MLflow DB) per module,
since creating MLflow's schema takes seconds."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aifab.core.errors import InvalidInputError
from aifab.data import commit_query, ingest, resolve

FAST = {"system_metrics": False, "threads": 1, "progress": False}


@pytest.fixture(scope="module", autouse=True)
def torch_threads() -> Iterator[None]:
    """The runs here use one thread (``threads: 1``); put torch's setting back afterwards."""
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    """Overrides the per-test workspace: every test here shares one."""
    return module_workspace


@pytest.fixture(scope="module")
def bc(module_workspace: Path) -> dict[str, Any]:
    """Breast cancer ingested from CSV, then a registered mlp trained on it."""
    from sklearn.datasets import load_breast_cancer

    from aifab.train.recipes.classify import main

    frame = load_breast_cancer(as_frame=True).frame
    frame.columns = [c.replace(" ", "_") for c in frame.columns]
    csv = module_workspace.parent / "bc.csv"
    frame.to_csv(csv, index=False)
    ingest("bc", str(csv))
    return main(
        {
            "dataset": "bc",
            "label": "target",
            "epochs": 15,
            "optim": {"lr": 3e-3},
            "register": "bc-clf",
            "alias": "champion",
            **FAST,
        }
    )


def test_breast_cancer_accuracy_tracking_and_registry(bc: dict[str, Any]) -> None:
    from aifab.models.checkpoint import load_model
    from aifab.track.registry import resolve_model
    from aifab.track.runs import get_run

    assert bc["metrics"]["test_accuracy"] >= 0.95
    assert bc["model"] == "mlp" and bc["classes"] == ["0", "1"]
    assert bc["model_version"] == 1 and bc["registered_as"] == "bc-clf"
    model, sidecar = load_model(bc["model_dir"])
    pre = sidecar["meta"]["preprocess"]
    assert sidecar["builder"] == "mlp" and sidecar["config"]["in_features"] == 30
    assert len(pre["features"]) == 30 and len(pre["standardize"]["mean"]) == 30
    assert sidecar["meta"]["datasets"] == [{"ref": "bc@1", "digest": resolve("bc").content_hash}]
    run = get_run(bc["run_id"])
    assert run["status"] == "FINISHED"
    assert run["params"]["dataset"] == "bc" and run["params"]["label"] == "target"
    assert run["params"]["register"] == "bc-clf"
    assert run["metrics"]["test_accuracy"] == pytest.approx(bc["metrics"]["test_accuracy"])
    assert [d["ref"] for d in run["datasets"]] == ["bc@1"]
    files = {a["path"] for a in run["artifacts"]}
    assert {"config.json", "model/aifab-model.json", "model/model.safetensors"} <= files
    assert "features/preprocess.json" in files
    mv = resolve_model("bc-clf@champion")
    assert mv["version"] == 1 and mv["run_id"] == bc["run_id"]


def test_model_lineage_walks_model_run_datasets(bc: dict[str, Any]) -> None:
    from aifab.train.lineage import model_lineage

    got = model_lineage("bc-clf@champion")
    assert got["model"]["name"] == "bc-clf" and got["model"]["version"] == 1
    assert got["model"]["aliases"] == ["champion"]
    assert got["run"]["id"] == bc["run_id"]
    assert got["run"]["params"]["dataset"] == "bc" and "optim.lr" in got["run"]["params"]
    assert "config.json" not in got["run"]["params"]
    assert got["run"]["metrics"]["test_accuracy"] >= 0.95
    [ds] = got["datasets"]
    assert ds["ref"] == "bc@1" and ds["digest"] == resolve("bc@1").content_hash
    assert ds["lineage"]["root"] == "bc@1"
    assert [n["transform"] for n in ds["lineage"]["nodes"]] == ["ingest"]


def test_digits_cnn(module_workspace: Path) -> None:
    from sklearn.datasets import load_digits

    from aifab.train.recipes.classify import main

    digits = load_digits()
    cols = {f"p{i}": digits.data[:, i].astype("float32") for i in range(64)}
    path = module_workspace.parent / "digits.parquet"
    pq.write_table(pa.table({**cols, "digit": digits.target}), path)
    ingest("digits", str(path))
    out = main(
        {
            "dataset": "digits",
            "label": "digit",
            "image_shape": [1, 8, 8],
            "epochs": 8,
            "batch_size": 64,
            "optim": {"lr": 3e-3},
            "model": {"config": {"channels": [16, 32]}},
            **FAST,
        }
    )
    assert out["model"] == "cnn" and len(out["classes"]) == 10
    assert out["metrics"]["test_accuracy"] >= 0.97


def test_text_classifier_learns_a_keyword(module_workspace: Path) -> None:
    from aifab.models.checkpoint import load_model
    from aifab.train.recipes.classify import main

    rng = random.Random(0)
    words = [
        "the",
        "a",
        "cat",
        "dog",
        "runs",
        "fast",
        "slow",
        "blue",
        "red",
        "green",
        "house",
        "tree",
        "river",
        "stone",
        "light",
    ]
    rows = []
    for i in range(400):
        text = [rng.choice(words) for _ in range(rng.randint(3, 6))]
        if i % 2 == 0:
            text.insert(rng.randrange(len(text) + 1), "excellent")
        rows.append({"review": " ".join(text), "label": "pos" if i % 2 == 0 else "neg"})
    path = module_workspace.parent / "reviews.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    ingest("reviews", str(path))
    out = main(
        {
            "dataset": "reviews",
            "text_column": "review",
            "epochs": 10,
            "vocab_size": 400,
            "max_length": 32,
            "optim": {"lr": 1e-2},
            "model": {
                "config": {
                    "d_model": 32,
                    "layers": 1,
                    "heads": 2,
                    "dim_feedforward": 64,
                    "dropout": 0.0,
                }
            },
            **FAST,
        }
    )
    assert out["model"] == "transformer-classifier"
    assert out["metrics"]["test_accuracy"] >= 0.9
    _, sidecar = load_model(out["model_dir"])
    assert sidecar["tokenizer"] and (Path(out["model_dir"]) / "tokenizer.json").is_file()
    assert sidecar["meta"]["preprocess"]["text_column"] == "review"


def _small_table() -> None:
    values = ", ".join(
        f"({i % 7 * 0.5 + (3 if i % 2 else 0)}, '{'xy'[i % 2]}', {i % 2}, "
        f"'{'train' if i % 10 < 7 else ('valid' if i % 10 < 9 else 'test')}')"
        for i in range(120)
    )
    commit_query(
        "small",
        f"SELECT * FROM (VALUES {values}) t(a, c, y, split)",
        source="test",
        transform={"kind": "test"},
    )


def test_feature_spec_is_fitted_logged_and_saved_with_the_model(bc: dict[str, Any]) -> None:
    from aifab.data.features import FeatureTransform
    from aifab.track.runs import get_run
    from aifab.train.recipes.classify import main

    _small_table()
    spec = {
        "features": [
            {"transform": "standardize", "column": "a"},
            {"transform": "onehot", "column": "c"},
        ]
    }
    out = main({"dataset": "small", "label": "y", "features": spec, "epochs": 3, **FAST})
    saved = Path(out["model_dir"]) / "feature_transform.json"
    ft = FeatureTransform.load(saved)
    assert ft.fitted_on["ref"] == "small@1" and not ft.fitted_on_all_rows
    files = {a["path"] for a in get_run(out["run_id"])["artifacts"]}
    assert "features/feature_transform.json" in files
    assert resolve("small.features").transform["feature_set"] == ft.digest
    # The fitted transform, by name, drives a second run that fine-tunes the first model
    # (with bf16 autocast on the CPU).
    again = main(
        {
            "dataset": "small",
            "label": "y",
            "features": "small.features",
            "base_model": out["model_dir"],
            "bf16": True,
            "epochs": 1,
            **FAST,
        }
    )
    assert again["metrics"]["test_accuracy"] >= 0.0
    meta = json.loads((Path(again["model_dir"]) / "aifab-model.json").read_text())["meta"]
    assert meta["preprocess"]["feature_transform"]["digest"] == ft.digest
    with pytest.raises(InvalidInputError, match="base_model: .* in_features=30; this data needs"):
        main({"dataset": "small", "label": "y", "features": ["a"], "base_model": bc["model_dir"]})


def test_early_stopping_stops_and_restores_best(module_workspace: Path) -> None:
    from aifab.train.recipes.classify import main

    _small_table()  # the same content commits once: the version is reused
    out = main(
        {
            "dataset": "small",
            "label": "y",
            "features": ["a"],
            "epochs": 50,
            "batch_size": 16,
            "eval_every": 2,
            "optim": {"lr": 1e-9, "warmup_steps": 0},
            "early_stopping": {"metric": "valid_loss", "patience": 2, "min_delta": 0.1},
            **FAST,
        }
    )
    assert out["stopped_early"] and out["steps"] == 6  # evals at 2, 4, 6: no 0.1 improvement
    assert out["metrics"]["best_step"] == 2


def test_custom_recipe_logs_into_the_same_run(module_workspace: Path, tmp_path: Path) -> None:
    from aifab.track.runs import get_run
    from aifab.train.recipes.custom import main

    script = tmp_path / "user_train.py"
    script.write_text(
        "import os, sys\n"
        "if sys.argv[1] != '0':\n"
        "    sys.exit(int(sys.argv[1]))\n"
        "from mlflow import MlflowClient\n"
        "c = MlflowClient(os.environ['MLFLOW_TRACKING_URI'])\n"
        "c.log_metric(os.environ['MLFLOW_RUN_ID'], 'user_metric', 0.75, step=3)\n"
        "sys.exit(int(sys.argv[1]))\n"
    )
    ok = main(
        {"command": [sys.executable, str(script), "0"], "params": {"k": 1}, "system_metrics": False}
    )
    run = get_run(ok["run_id"])
    assert ok["exit_code"] == 0 and run["status"] == "FINISHED"
    assert run["metrics"]["user_metric"] == 0.75 and run["params"]["k"] == "1"
    with pytest.raises(SystemExit) as exc:
        main({"command": [sys.executable, str(script), "3"], "system_metrics": False})
    assert exc.value.code == 3
    from aifab.track.runs import list_runs

    latest = get_run(list_runs("custom", limit=1)[0]["id"])
    assert latest["status"] == "FAILED" and latest["tags"]["aifab.exit_code"] == "3"


def test_sweep_trial_gets_reports_objective_and_run(
    module_workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import optuna

    from aifab.train.recipes.classify import main
    from aifab.train.trial import ATTR_OBJECTIVE, ATTR_RUN_ID, open_storage, trial_env

    url = f"sqlite:///{module_workspace.parent / 'sweep.db'}"
    storage = open_storage(url)
    study = optuna.create_study(study_name="clf", storage=storage, direction="maximize")
    trial = study.ask()
    for key, value in trial_env(url, "clf", trial.number, "valid_accuracy").items():
        monkeypatch.setenv(key, value)
    _small_table()
    out = main({"dataset": "small", "label": "y", "features": ["a"], "epochs": 2, **FAST})
    frozen = storage.get_trial(trial._trial_id)
    assert frozen.user_attrs[ATTR_OBJECTIVE] == out["metrics"]["valid_accuracy"]
    assert frozen.user_attrs[ATTR_RUN_ID] == out["run_id"]
    assert sorted(frozen.intermediate_values) == [3, 6]  # one report per epoch-end eval
    assert not out["pruned"]


def test_image_folder_trains_a_cnn(module_workspace: Path) -> None:
    from PIL import Image

    from aifab.train.recipes.classify import main

    root = module_workspace.parent / "shapes"
    for label, value in (("dark", 30), ("light", 220)):
        (root / label).mkdir(parents=True)
        for i in range(12):
            Image.new("L", (10, 12), color=value + i).save(root / label / f"{i}.png")
    ingest("shapes", str(root))
    out = main(
        {
            "dataset": "shapes",
            "image_column": "path",
            "image_shape": [1, 8, 8],
            "epochs": 5,
            "batch_size": 8,
            "optim": {"lr": 1e-2},
            "model": {"config": {"channels": [4]}},
            **FAST,
        }
    )
    assert out["model"] == "cnn" and out["classes"] == ["dark", "light"]
    assert out["metrics"]["test_accuracy"] == 1.0
