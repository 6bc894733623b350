"""The deployment store: validation, create/update/canary/promote/rollback/delete, audit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aifab.core.audit import list_events
from aifab.core.db import session_scope
from aifab.core.errors import ConflictError, InvalidInputError, NotFoundError
from aifab.inference.deployments import (
    create_deployment,
    delete_deployment,
    get_deployment,
    list_deployments,
    promote_canary,
    report_status,
    rollback_canary,
    update_deployment,
)
from aifab.track import register_model, resolve_model, set_alias, start_run


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def models(module_workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``m`` versions 1-3 (``champion`` -> 1) and ``other`` version 1; files are placeholders."""
    model = tmp_path_factory.mktemp("model")
    (model / "aifab-model.json").write_text('{"builder": "mlp", "config": {}}')
    with start_run("t-deployments", system_metrics=False) as run:
        run.log_artifacts(model, "model")
    for _ in range(3):
        register_model(run.id, "model", "m")
    register_model(run.id, "model", "other")
    set_alias("m", "champion", 1)
    return {"dir": model}


_START: list[int] = [0]


@pytest.fixture(autouse=True)
def _clean(models: dict[str, Any]) -> Iterator[None]:
    with session_scope() as s:
        newest = list_events(s, limit=1)
        _START[0] = newest[0].id if newest else 0
    yield
    for d in list_deployments():
        delete_deployment(d["name"])
    set_alias("m", "champion", 1)


def _actions(name: str) -> list[str]:
    """This test's audited actions on deployment ``name``, oldest first."""
    with session_scope() as s:
        events = list_events(s, limit=100, action="deployment.")
        return [
            e.action
            for e in reversed(events)
            if e.object == f"deployment:{name}" and e.id > _START[0]
        ]


def test_create_defaults_and_get() -> None:
    dep = create_deployment("m@champion")
    assert dep["name"] == "m" and dep["model"] == "m@champion" and dep["canary"] is None
    assert (dep["replicas"], dep["max_batch_size"], dep["max_wait_ms"]) == (1, 1, 0.0)
    assert dep["backend"] == "torch" and dep["options"] == {}
    assert dep["generation"] == 1 and dep["status"] == "pending" and dep["serving"] == {}
    assert dep["created_by"] == "user:test"
    assert get_deployment("m") == dep
    assert [d["name"] for d in list_deployments()] == ["m"]
    with pytest.raises(ConflictError, match="deployment 'm' exists"):
        create_deployment("m@2")
    assert _actions("m") == ["deployment.create"]


def test_sources_builtin_and_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dep = create_deployment("builtin:all-minilm-l6-v2", max_batch_size=32, max_wait_ms=5)
    assert dep["name"] == "all-minilm-l6-v2" and dep["max_batch_size"] == 32
    model_dir = tmp_path / "My_Model"
    model_dir.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AIFAB_MODEL_ROOTS", str(tmp_path))
    dep = create_deployment("./My_Model", backend="onnx", options={"max_request_items": 10})
    assert dep["name"] == "my_model" and dep["model"] == str(model_dir)
    assert dep["backend"] == "onnx" and dep["options"] == {"max_request_items": 10}


@pytest.mark.parametrize(
    ("source", "kwargs", "error", "match"),
    [
        ("nope@1", {}, NotFoundError, "model 'nope'"),
        ("m@9", {}, NotFoundError, "no version 9"),
        ("m@staging", {}, NotFoundError, "no alias 'staging'"),
        ("builtin:gpt-9", {}, InvalidInputError, "unknown builtin"),
        ("./missing-dir", {}, InvalidInputError, "does not exist"),
        ("m@1", {"name": "Bad Name"}, InvalidInputError, "name 'Bad Name'"),
        ("m@1", {"replicas": 0}, InvalidInputError, "replicas"),
        ("m@1", {"replicas": 17}, InvalidInputError, "replicas"),
        ("m@1", {"max_batch_size": 2000}, InvalidInputError, "max_batch_size"),
        ("m@1", {"max_wait_ms": -1}, InvalidInputError, "max_wait_ms"),
        ("m@1", {"max_wait_ms": 5000}, InvalidInputError, "max_wait_ms"),
        ("m@1", {"backend": "tensorrt"}, InvalidInputError, "backend 'tensorrt'"),
        ("m@1", {"canary": "m@2", "canary_weight": 101}, InvalidInputError, "canary_weight"),
        ("m@1", {"canary_weight": 10}, InvalidInputError, "no canary"),
        ("m@1", {"canary": "m@7"}, NotFoundError, "no version 7"),
        ("m@1", {"sticky_header": "X User"}, InvalidInputError, "sticky_header"),
        ("m@1", {"options": {"x": object()}}, InvalidInputError, "options"),
    ],
)
def test_bad_input_is_refused_naming_the_field(
    source: str, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        create_deployment(source, **kwargs)
    assert list_deployments() == []


def test_update_bumps_generation_only_on_change() -> None:
    create_deployment("m@champion")
    report_status("m", 1, "ready", serving={"primary": "m@1"})
    dep = update_deployment("m", max_batch_size=16, max_wait_ms=2.5)
    assert dep["generation"] == 2 and dep["status"] == "pending"
    assert (dep["max_batch_size"], dep["max_wait_ms"]) == (16, 2.5)
    same = update_deployment("m", max_batch_size=16, max_wait_ms=2.5, backend="torch")
    assert same["generation"] == 2
    dep = update_deployment("m", model="m@3")
    assert dep["model"] == "m@3" and dep["generation"] == 3
    assert _actions("m") == ["deployment.create", "deployment.update", "deployment.update"]
    with pytest.raises(InvalidInputError, match="unknown deployment setting"):
        update_deployment("m", gpus=2)
    with pytest.raises(InvalidInputError, match="replicas"):
        update_deployment("m", replicas=99)
    with pytest.raises(NotFoundError, match="no deployment 'zz' \\(deployments: m\\)"):
        update_deployment("zz", replicas=2)
    assert get_deployment("m")["generation"] == 3


def test_canary_add_and_remove() -> None:
    create_deployment("m@champion", canary="m@2", canary_weight=10, sticky_header="X-User")
    dep = get_deployment("m")
    assert dep["canary"] == "m@2" and dep["canary_weight"] == 10.0
    assert dep["sticky_header"] == "X-User"
    dep = update_deployment("m", canary_weight=25)
    assert dep["canary_weight"] == 25.0 and dep["generation"] == 2
    dep = update_deployment("m", canary=None)
    assert dep["canary"] is None and dep["canary_weight"] == 0.0 and dep["generation"] == 3


def test_promote_moves_the_alias_when_the_primary_is_one() -> None:
    create_deployment("m@champion", canary="m@2", canary_weight=10)
    dep = promote_canary("m")
    assert dep["model"] == "m@champion" and dep["canary"] is None and dep["generation"] == 2
    assert resolve_model("m@champion")["version"] == 2
    assert _actions("m") == ["deployment.create", "deployment.promote"]
    with pytest.raises(ConflictError, match="no canary to promote"):
        promote_canary("m")


def test_promote_replaces_a_pinned_primary() -> None:
    create_deployment("m@1", name="pinned", canary="m@3", canary_weight=50)
    dep = promote_canary("pinned")
    assert dep["model"] == "m@3" and dep["canary"] is None
    assert resolve_model("m@champion")["version"] == 1  # untouched
    create_deployment("m@champion", name="cross", canary="other@1", canary_weight=5)
    assert promote_canary("cross")["model"] == "other@1"  # another model: no alias to move
    assert resolve_model("m@champion")["version"] == 1


@pytest.fixture(scope="module")
def scored(models: dict[str, Any]) -> dict[str, int]:
    """``scored`` versions of recorded test accuracy 0.92 (champion) and 0.649 and 0.91."""
    versions = {}
    for accuracy in (0.92, 0.649, 0.91):
        with start_run("t-deployments-scored", system_metrics=False) as run:
            run.log_artifacts(models["dir"], "model")
            run.log_metrics({"test_accuracy": accuracy}, 0)
        versions[accuracy] = int(register_model(run.id, "model", "scored")["version"])
    set_alias("scored", "champion", versions[0.92])
    return {"good": versions[0.92], "worse": versions[0.649], "close": versions[0.91]}


def test_promoting_a_worse_canary_needs_force_and_says_by_how_much(
    scored: dict[str, int],
) -> None:
    create_deployment("scored@champion", canary=f"scored@{scored['worse']}", canary_weight=10)
    with pytest.raises(ConflictError, match=r"test_accuracy: 0\.6490 vs 0\.9200 \(-0\.2710\)"):
        promote_canary("scored")
    dep = get_deployment("scored")
    assert dep["canary"] == f"scored@{scored['worse']}" and dep["generation"] == 1  # unchanged
    assert resolve_model("scored@champion")["version"] == scored["good"]
    assert promote_canary("scored", force=True)["canary"] is None
    assert resolve_model("scored@champion")["version"] == scored["worse"]
    set_alias("scored", "champion", scored["good"])
    # Within the gate's tolerance (0.02) it is no worse: no force needed.
    update_deployment("scored", canary=f"scored@{scored['close']}", canary_weight=10)
    assert promote_canary("scored")["canary"] is None
    set_alias("scored", "champion", scored["good"])


def test_rollback_drops_the_canary() -> None:
    create_deployment("m@champion", canary="m@3", canary_weight=10)
    dep = rollback_canary("m")
    assert dep["model"] == "m@champion" and dep["canary"] is None and dep["canary_weight"] == 0
    assert resolve_model("m@champion")["version"] == 1
    assert _actions("m") == ["deployment.create", "deployment.rollback"]
    with pytest.raises(ConflictError, match="no canary to roll back"):
        rollback_canary("m")


def test_report_status_ignores_stale_generations() -> None:
    create_deployment("m@champion")
    assert report_status("m", 1, "loading")
    update_deployment("m", replicas=2)
    assert not report_status("m", 1, "ready", serving={"primary": "m@1"})  # stale
    assert get_deployment("m")["status"] == "pending"
    assert report_status("m", 2, "failed", reason="model files missing")
    dep = get_deployment("m")
    assert dep["status"] == "failed" and dep["status_reason"] == "model files missing"
    assert report_status("m", 2, "ready", serving={"primary": "m@1"})
    dep = get_deployment("m")
    assert dep["status"] == "ready" and dep["serving"] == {"primary": "m@1"}
    assert dep["status_reason"] is None
    assert not report_status("gone", 1, "ready")
    with pytest.raises(InvalidInputError, match="status 'great'"):
        report_status("m", 2, "great")


def test_delete() -> None:
    create_deployment("m@1")
    delete_deployment("m")
    assert list_deployments() == []
    with pytest.raises(NotFoundError, match="no deployment 'm'"):
        get_deployment("m")
    with pytest.raises(NotFoundError):
        delete_deployment("m")
    assert _actions("m")[-1] == "deployment.delete"
