"""Recipe configs are validated before a job starts: bad keys, types, datasets, columns,
single-class labels and base model directories are named; good ones become a JobSpec dict."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from aifab.core.errors import InvalidInputError
from aifab.data import commit_query
from aifab.train.submit import apply_overrides, build_job_spec, validate_recipe_config


@pytest.fixture(autouse=True)
def data() -> None:
    commit_query(
        "toy",
        "SELECT * FROM (VALUES (1.0, 2, 'a', 'x'), (2.0, 3, 'b', 'x'), (3.0, 1, 'a', 'x')) "
        "t(f1, f2, y, same)",
        source="test",
        transform={"kind": "test"},
    )


def bad(match: str, config: object, *overrides: str, recipe: str = "classify") -> None:
    with pytest.raises(InvalidInputError, match=match):
        build_job_spec(recipe, config, overrides)  # type: ignore[arg-type]


def test_good_yaml_with_overrides_becomes_a_job_spec(tmp_path: Path) -> None:
    from aifab.jobs.spec import JobSpec

    cfg = tmp_path / "clf.yaml"
    cfg.write_text("dataset: toy\nlabel: y\nfeatures: [f1, f2]\noptim:\n  lr: 0.01\n")
    spec = build_job_spec(
        "classify",
        cfg,
        ["optim.lr=3e-4", "epochs=2", "model.config.hidden=[8, 8]", "register=toy-model"],
        name="toy-train",
        replicas=2,
        resources={"cpu": 1, "memory": "1Gi"},
        job={"queue": "default", "max_retries": 1},
    )
    conf = spec["run"]["config"]
    assert spec["run"]["recipe"] == "classify" and spec["replicas"] == 2
    assert conf["optim"]["lr"] == 3e-4 and conf["epochs"] == 2
    assert conf["model"]["config"] == {"hidden": [8, 8]} and conf["register"] == "toy-model"
    assert conf["batch_size"] == 32  # defaults are resolved into the spec
    job = JobSpec.model_validate(spec)
    assert job.replicas == 2 and job.max_retries == 1 and job.name == "toy-train"


def test_overrides_parse_yaml_scalars_into_nested_keys() -> None:
    got = apply_overrides({"a": {"b": 1}}, ["a.c=true", "d=null", "e=[1, x]", "f=1e-3", "g="])
    assert got == {"a": {"b": 1, "c": True}, "d": None, "e": [1, "x"], "f": 1e-3, "g": ""}
    with pytest.raises(InvalidInputError, match="override 'epochs': expected KEY=VALUE"):
        apply_overrides({}, ["epochs"])
    with pytest.raises(InvalidInputError, match="a.b is not a mapping"):
        apply_overrides({"a": {"b": 1}}, ["a.b.c=2"])


def test_unknown_keys_and_wrong_types_are_named(tmp_path: Path) -> None:
    bad("lable: unknown key", {"dataset": "toy", "lable": "y"})
    bad("epochs: Input should be a valid integer", {"dataset": "toy", "label": "y"}, "epochs=many")
    bad("optim.lr: Input should be greater than 0", {"dataset": "toy", "label": "y"}, "optim.lr=0")
    bad("optim.lrr: unknown key", {"dataset": "toy", "label": "y"}, "optim.lrr=1")
    bad("dataset: Field required", {"label": "y"})
    bad(
        "strategy: Input should be 'ddp', 'fsdp' or 'deepspeed'",
        {"dataset": "toy"},
        "strategy=zero",
    )
    yaml_file = tmp_path / "broken.yaml"
    yaml_file.write_text("dataset: toy\nlabel: [y\n")
    bad("broken.yaml:3:1: invalid YAML", yaml_file)
    bad("unknown recipe 'clasify'", {"dataset": "toy"}, recipe="clasify")


def test_missing_dataset_and_columns_are_named() -> None:
    bad("dataset: dataset 'nope' not found", {"dataset": "nope", "label": "y"})
    bad("dataset: dataset 'toy' has no version 'toy@9'", {"dataset": "toy@9", "label": "y"})
    bad("column 'target' not found", {"dataset": "toy", "label": "target"})
    bad("column 'f9' not found", {"dataset": "toy", "label": "y", "features": ["f1", "f9"]})
    bad("column 'body' not found", {"dataset": "toy", "label": "y", "text_column": "body"})
    spec = {"features": [{"transform": "standardize", "column": "zz"}]}
    bad("zz", {"dataset": "toy", "label": "y", "features": spec})
    bad("features: .*not found", {"dataset": "toy", "label": "y", "features": "no-such-set"})


def test_single_class_label_is_rejected() -> None:
    bad("label column 'same' has only one class \\('x'\\)", {"dataset": "toy", "label": "same"})


def test_base_model_must_be_a_model_directory(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hi")
    bad(
        f"{tmp_path} is not a model directory",
        {"dataset": "toy", "label": "y", "base_model": str(tmp_path)},
    )


def test_custom_recipe_checks_command_and_datasets() -> None:
    spec = build_job_spec("custom", {"command": f"{sys.executable} -c pass", "datasets": ["toy"]})
    assert spec["run"]["config"]["command"] == [sys.executable, "-c", "pass"]
    bad(
        "command: program 'no-such-program-x' not found",
        {"command": ["no-such-program-x"]},
        recipe="custom",
    )
    bad(
        "datasets\\[0\\]: dataset 'gone' not found",
        {"command": ["true"], "datasets": ["gone"]},
        recipe="custom",
    )
    bad("command: List should have at least 1 item", {"command": []}, recipe="custom")


def test_deepspeed_strategy_needs_deepspeed() -> None:
    import importlib.util

    if importlib.util.find_spec("deepspeed") is not None:
        pytest.skip("deepspeed is installed here")
    bad(
        "strategy: deepspeed is not installed",
        {"dataset": "toy", "label": "y"},
        "strategy=deepspeed",
    )


def test_validation_can_skip_input_checks() -> None:
    cfg = validate_recipe_config("classify", {"dataset": "later"}, check_inputs=False)
    assert cfg.dataset == "later"  # type: ignore[attr-defined]
