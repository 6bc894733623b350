"""The model registry: versions from run artifacts, aliases, refs, downloads and audit events."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aifab.core.audit import list_events
from aifab.core.db import session_scope
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.track import (
    download_model,
    get_client,
    list_models,
    list_versions,
    register_model,
    resolve_model,
    set_alias,
    start_run,
)
from aifab.track.registry import attach_export


@pytest.fixture(scope="module")
def runs(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two finished runs, each with a ``model`` directory artifact (weights differ)."""
    ids = []
    for i in range(2):  # ``home`` has set the shared workspace in the environment
        model = tmp_path_factory.mktemp(f"model{i}")
        (model / "weights.bin").write_bytes(bytes([i]) * 8)
        (model / "aifab-model.json").write_text(f'{{"i": {i}}}')
        with start_run("t-registry", system_metrics=False) as run:
            run.log_artifacts(model, "model")
        ids.append(run.id)
    yield ids


def test_register_versions_and_resolve(runs: list[str]) -> None:
    v1 = register_model(runs[0], "model", "reg-a", tags={"task": "classify"})
    v2 = register_model(runs[1], "model/", "reg-a")
    assert (v1["version"], v2["version"]) == (1, 2)
    assert v1["source"] == f"runs:/{runs[0]}/model" and v1["tags"] == {"task": "classify"}
    assert [v["version"] for v in list_versions("reg-a")] == [2, 1]
    assert resolve_model("reg-a")["run_id"] == runs[1]
    assert resolve_model("reg-a@latest")["version"] == 2
    assert resolve_model("reg-a@1")["run_id"] == runs[0]
    row = next(m for m in list_models() if m["name"] == "reg-a")
    assert (row["latest"], row["versions"], row["aliases"]) == (2, 2, {})


def test_mlflow_model_uris_name_the_same_versions(runs: list[str]) -> None:
    # models:/NAME/VERSION is what an adapter's adapter_config.json names as its base.
    register_model(runs[0], "model", "reg-u")
    register_model(runs[1], "model", "reg-u")
    set_alias("reg-u", "champion", 1)
    assert resolve_model("models:/reg-u/1")["run_id"] == runs[0]
    assert resolve_model("models:/reg-u/latest")["version"] == 2
    assert resolve_model("models:/reg-u@champion")["version"] == 1
    assert download_model("models:/reg-u/2") == download_model("reg-u@2")
    from aifab.inference.loading import resolve_source  # what a deployment's source goes through

    assert resolve_source("models:/reg-u@champion") == "reg-u@1"
    from aifab.inference.deployment_settings import check_source, default_name

    assert check_source("models:/reg-u@champion") == "reg-u@champion"  # still follows the alias
    assert check_source("models:/reg-u/2") == "reg-u@2"
    assert default_name("models:/reg-u/2") == "reg-u"
    for bad in ("models:/reg-u/champion", "models:/reg-u/", "models:/reg-u/1/x"):
        with pytest.raises(InvalidInputError, match="expected models:/NAME/VERSION"):
            resolve_model(bad)


def test_champion_alias_moves_and_is_audited(runs: list[str]) -> None:
    register_model(runs[0], "model", "reg-b")
    register_model(runs[1], "model", "reg-b")
    first = set_alias("reg-b", "champion", 1)
    assert first["version"] == 1 and first["previous"] is None
    moved = set_alias("reg-b", "champion", "2")
    assert moved["version"] == 2 and moved["previous"] == 1 and moved["aliases"] == ["champion"]
    assert resolve_model("reg-b@champion")["run_id"] == runs[1]
    assert resolve_model("reg-b@1")["aliases"] == []
    assert next(m for m in list_models() if m["name"] == "reg-b")["aliases"] == {"champion": 2}
    with session_scope() as s:
        events = [
            (e.action, e.object, e.actor)
            for e in reversed(list_events(s, limit=200, action="model."))
            if e.object.startswith("model:reg-b@")
        ]
    assert events == [
        ("model.register", "model:reg-b@1", "user:test"),
        ("model.register", "model:reg-b@2", "user:test"),
        ("model.alias", "model:reg-b@1", "user:test"),
        ("model.alias", "model:reg-b@2", "user:test"),
    ]


def test_missing_things_are_named(runs: list[str]) -> None:
    register_model(runs[0], "model", "reg-c")
    set_alias("reg-c", "champion", 1)
    with pytest.raises(NotFoundError, match="model 'nope' not found"):
        resolve_model("nope")
    with pytest.raises(NotFoundError, match=r"model 'reg-c' has no version 9 \(versions: 1\)"):
        resolve_model("reg-c@9")
    with pytest.raises(NotFoundError, match=r"has no alias 'gold' \(aliases: champion\)"):
        resolve_model("reg-c@gold")
    with pytest.raises(NotFoundError, match="has no version 4"):
        set_alias("reg-c", "champion", 4)
    with pytest.raises(NotFoundError, match=f"run {runs[0]} has no artifact 'weights'"):
        register_model(runs[0], "weights", "reg-c")
    with pytest.raises(NotFoundError, match="run 'f00' not found"):
        register_model("f00", "model", "reg-c")
    with pytest.raises(InvalidInputError, match="expected NAME"):
        resolve_model("reg-c@")
    with pytest.raises(InvalidInputError, match="model name 'a b'"):
        register_model(runs[0], "model", "a b")
    with pytest.raises(InvalidInputError, match="alias 'v2'"):
        set_alias("reg-c", "v2", 1)


def test_download_returns_the_files_once_per_version(runs: list[str], home: Path) -> None:
    register_model(runs[0], "model", "reg-d")
    register_model(runs[1], "model", "reg-d")
    set_alias("reg-d", "champion", 1)
    path = download_model("reg-d@champion")
    assert sorted(p.name for p in path.iterdir()) == ["aifab-model.json", "weights.bin"]
    assert (path / "weights.bin").read_bytes() == b"\x00" * 8
    assert path.is_relative_to(home)
    assert download_model("reg-d@1") == path  # reused, not downloaded again
    latest = download_model("reg-d")
    assert latest != path and (latest / "weights.bin").read_bytes() == b"\x01" * 8


def test_latest_of_a_model_without_versions_is_named() -> None:
    get_client().create_registered_model("reg-empty")
    with pytest.raises(NotFoundError, match="model 'reg-empty' has no versions"):
        resolve_model("reg-empty")
    assert list_versions("reg-empty") == []


def test_attach_export_logs_files_and_tags_the_version(runs: list[str], tmp_path: Path) -> None:
    register_model(runs[0], "model", "reg-e")
    export = tmp_path / "onnx"
    export.mkdir()
    (export / "model.onnx").write_bytes(b"onnx")
    uri = attach_export("reg-e@1", export, "onnx")
    assert uri == f"runs:/{runs[0]}/exports/onnx"
    assert resolve_model("reg-e")["tags"]["aifab.export.onnx"] == uri
    files = [a.path for a in get_client().list_artifacts(runs[0], "exports/onnx")]
    assert files == ["exports/onnx/model.onnx"]
    with pytest.raises(InvalidInputError, match="format 'ONNX'"):
        attach_export("reg-e@1", export, "ONNX")
    with pytest.raises(InvalidInputError, match="export directory does not exist"):
        attach_export("reg-e@1", tmp_path / "missing", "onnx")
    with pytest.raises(NotFoundError, match="has no version 7"):
        attach_export("reg-e@7", export, "onnx")


def test_an_alias_moved_directly_in_mlflow_is_picked_up_and_audited(runs: list[str]) -> None:
    register_model(runs[0], "model", "reg-ext")
    register_model(runs[1], "model", "reg-ext")
    set_alias("reg-ext", "champion", 1)
    get_client().set_registered_model_alias("reg-ext", "champion", "2")  # MLflow's UI or API
    assert resolve_model("reg-ext@champion")["version"] == 2
    assert resolve_model("reg-ext@champion")["version"] == 2  # noted once, not per resolve
    with session_scope() as s:
        events = [
            (e.action, e.object)
            for e in reversed(list_events(s, limit=200, action="model."))
            if e.object.startswith("model:reg-ext@")
        ]
    assert events[-2:] == [("model.alias", "model:reg-ext@1"), ("model.alias", "model:reg-ext@2")]
    assert [a for a, _ in events].count("model.alias") == 2
