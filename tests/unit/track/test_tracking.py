"""Runs on the workspace MLflow store: buffered metrics, params, tags, datasets, artifacts."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from aifab.core.errors import AifabError, ConflictError, InvalidInputError, NotFoundError
from aifab.track import get_client, get_run, metric_history, resume_run, run_env, start_run
from aifab.track.tracking import flatten_params, tracking_uri

DATASETS = [
    {"name": "iris", "ref": "iris@2", "digest": "d" * 64, "source": "test", "num_rows": 150,
     "schema": [{"name": "x", "type": "DOUBLE"}]},
    {"name": "iris", "ref": "iris@3", "digest": "e" * 64, "num_rows": 30, "context": "validation"},
]  # fmt: skip


def test_metric_history_equals_what_was_logged(workspace: Path) -> None:
    with start_run("t-metrics", run_name="m", system_metrics=False) as run:
        for step in range(60):
            run.log_metrics({"loss": 1.0 / (step + 1), "acc": step / 60, "lr": 0.1}, step=step)
        for step in range(60, 2560):  # crosses the early-flush threshold and the 1,000 batch cap
            run.log_metrics({"loss": 0.0}, step=step)
    loss = metric_history(run.id, "loss")
    assert [p["step"] for p in loss] == list(range(2560))
    assert [p["value"] for p in loss[:60]] == [1.0 / (s + 1) for s in range(60)]
    acc = metric_history(run.id, "acc")
    assert [(p["step"], p["value"]) for p in acc] == [(s, s / 60) for s in range(60)]
    shown = get_run(run.id)
    assert shown["status"] == "FINISHED"
    assert shown["metrics"] == {"loss": 0.0, "acc": 59 / 60, "lr": 0.1}


def test_background_thread_writes_before_end() -> None:
    run = start_run("t-metrics", system_metrics=False)
    run.log_metrics({"x": 1.0, "y": 2.0}, step=3)
    deadline = time.monotonic() + 15
    while not metric_history(run.id, "y") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert metric_history(run.id, "y") == [
        {"step": 3, "value": 2.0, "timestamp": metric_history(run.id, "y")[0]["timestamp"]}
    ]
    run.end()


def test_params_tags_datasets_and_code_version(workspace: Path) -> None:
    params = {"optimizer": {"lr": 0.001, "betas": [0.9, 0.99]}, "epochs": 3, "note": "n" * 7000}
    with start_run("t-meta", params=params, tags={"team": "a"}, datasets=DATASETS) as run:
        pass
    shown = get_run(run.id)
    assert shown["params"]["optimizer.lr"] == "0.001"
    assert shown["params"]["optimizer.betas"] == "[0.9, 0.99]"
    assert shown["params"]["epochs"] == "3"
    assert len(shown["params"]["note"]) == 6000 and shown["params"]["note"].endswith("(truncated)")
    tags = shown["tags"]
    assert tags["team"] == "a" and tags["mlflow.user"] == "user:test"
    assert "torch" in json.loads(tags["aifab.packages"]) and tags["aifab.version"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:
        assert tags["aifab.git_commit"] == head.stdout.strip()
        assert tags["aifab.git_dirty"] in ("true", "false")
    by_ref = {d["ref"]: d for d in shown["datasets"]}
    assert by_ref["iris@2"] == {
        "name": "iris", "ref": "iris@2", "context": "training", "digest": "d" * 64,
        "source": "test", "num_rows": 150,
    }  # fmt: skip
    assert by_ref["iris@3"]["context"] == "validation" and by_ref["iris@3"]["num_rows"] == 30
    assert str(workspace / "artifacts" / "mlflow" / "t-meta") in shown["artifact_uri"]


def test_artifacts(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"\x00" * 10)
    (model / "aifab-model.json").write_text("{}")
    (tmp_path / "report.txt").write_text("ok")
    with start_run("t-art", system_metrics=False) as run:
        run.log_artifacts(model, "model")
        run.log_artifact(tmp_path / "report.txt", "reports")
        run.log_dict({"a": 1}, "config.json")
        with pytest.raises(NotFoundError, match="missing"):
            run.log_artifact(tmp_path / "missing")
    paths = {a["path"]: a["size"] for a in get_run(run.id)["artifacts"]}
    assert paths == {
        "config.json": paths["config.json"],
        "model/aifab-model.json": 2,
        "model/weights.bin": 10,
        "reports/report.txt": 2,
    }


def test_failed_block_marks_run_failed_and_resume_continues() -> None:
    with pytest.raises(RuntimeError), start_run("t-resume", params={"lr": 0.1}) as run:
        run.log_metrics({"loss": 1.0}, step=0)
        raise RuntimeError("boom")
    assert get_run(run.id)["status"] == "FAILED"
    with resume_run(run.id, system_metrics=False) as again:
        again.log_params({"lr": 0.1})  # the same value again is fine
        again.log_metrics({"loss": 0.5}, step=1)
        with pytest.raises(ConflictError, match="another value"):
            again.log_params({"lr": 0.2})
    assert [p["value"] for p in metric_history(run.id, "loss")] == [1.0, 0.5]
    assert get_run(run.id)["status"] == "FINISHED"
    with pytest.raises(ConflictError, match="has ended"):
        again.log_metrics({"loss": 0.1}, step=2)
    with pytest.raises(NotFoundError, match="run 'nope' not found"):
        resume_run("nope")


def test_bad_input_is_named() -> None:
    with pytest.raises(InvalidInputError, match=r"datasets\[0\]: missing \['digest'\]"):
        start_run("t-bad", datasets=[{"name": "a", "ref": "a@1"}])
    with pytest.raises(InvalidInputError, match=r"datasets\[0\]: unknown keys \['rows'\]"):
        start_run("t-bad", datasets=[{"name": "a", "ref": "a@1", "digest": "x", "rows": 1}])
    with start_run("t-bad", system_metrics=False) as run:
        with pytest.raises(InvalidInputError, match="metric 'loss': 'high' is not a number"):
            run.log_metrics({"loss": "high"}, step=0)  # type: ignore[dict-item]
        with pytest.raises(InvalidInputError, match="metric name 'a//b'"):
            run.log_metrics({"a//b": 1.0}, step=0)
        with pytest.raises(InvalidInputError, match=r"param name 'x\?'"):
            run.log_params({"x?": 1})


def test_flush_errors_surface_at_end() -> None:
    run = start_run("t-flush", system_metrics=False)
    get_client().delete_run(run.id)  # the store now refuses writes to this run
    run.log_metrics({"loss": 1.0, "acc": 0.5}, step=0)
    with pytest.raises(AifabError, match="2 metric points were not written"):
        run.end()
    get_client().restore_run(run.id)


def test_run_env_and_uri(workspace: Path) -> None:
    assert tracking_uri() == f"sqlite:///{workspace / 'mlflow.db'}"
    with start_run("t-env", system_metrics=False) as run:
        assert run_env(run) == {"MLFLOW_TRACKING_URI": tracking_uri(), "MLFLOW_RUN_ID": run.id}


def test_flatten_params() -> None:
    flat = flatten_params({"a": {"b": {"c": 1}, "d": None}, "e": (1, 2), "f": {}})
    assert flat == {"a.b.c": "1", "a.d": "None", "e": "[1, 2]", "f": "{}"}


def test_default_experiment_artifacts_live_in_the_workspace(workspace: Path) -> None:
    from aifab.track import get_client

    default = get_client().get_experiment("0")
    assert default.name == "Default"
    assert default.artifact_location.removeprefix("file://").startswith(str(workspace))


def test_seeded_runs_get_unique_names_and_a_source(workspace: Path) -> None:
    import random

    names = []
    for _ in range(2):
        random.seed(7)  # as recipes seed before starting their run
        with start_run("t-names", system_metrics=False) as run:
            pass
        names.append(get_client().get_run(run.id).info.run_name)
    assert names[0] != names[1] and all(n.startswith("t-names-") for n in names)
    tags = get_client().get_run(run.id).data.tags
    assert tags["mlflow.source.type"] == "LOCAL" and tags["mlflow.source.name"]
