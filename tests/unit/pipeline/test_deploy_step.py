"""The ``deploy`` pipeline step: creates or updates a deployment, idempotently."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from aifab.inference.deployments import delete_deployment, get_deployment, list_deployments
from aifab.pipeline import PipelineSpec
from aifab.pipeline.runner import run_pipeline
from aifab.pipeline.spec import PreparedStep, StepContext, StepOutputs
from aifab.pipeline.steps import STEPS
from aifab.track import register_model, start_run


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def run_id(module_workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An MLflow run with a ``model`` artifact (stands in for a train step's run)."""
    model = tmp_path_factory.mktemp("model")
    (model / "aifab-model.json").write_text('{"builder": "mlp", "config": {}}')
    with start_run("t-deploy-step", system_metrics=False) as run:
        run.log_artifacts(model, "model")
    register_model(run.id, "model", "churny")
    return run.id


@pytest.fixture(autouse=True)
def _clean() -> Any:
    yield
    for d in list_deployments():
        delete_deployment(d["name"])


def fake_train_step(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """A train step without training: reports the run it was given."""

    def run() -> StepOutputs:
        return StepOutputs(details={"run_id": params["run_id"]})

    return PreparedStep(run=run, state={"run_id": params["run_id"]})


STEPS.register("test.fake_train", f"{__name__}:fake_train_step")


def _pipeline(*steps: dict[str, Any]) -> PipelineSpec:
    return PipelineSpec.model_validate({"name": "deploying", "steps": list(steps)})


def _deploy(**with_: Any) -> dict[str, Any]:
    return {"name": "deploy", "uses": "deploy", "with": with_}


def test_deploy_creates_then_is_a_no_op_then_updates(run_id: str) -> None:
    spec = _pipeline(_deploy(model="churny@1", name="churn", max_batch_size=8, max_wait_ms=2))
    result = run_pipeline(spec)
    assert result.ok, result.error
    details = result.step("deploy").outputs["details"]
    assert details == {
        "deployment": "churn",
        "model": "churny@1",
        "action": "created",
        "generation": 1,
    }
    dep = get_deployment("churn")
    assert (dep["model"], dep["max_batch_size"], dep["max_wait_ms"]) == ("churny@1", 8, 2.0)

    again = run_pipeline(spec)
    assert again.step("deploy").status == "succeeded"  # always runs: the DB may have changed
    assert again.step("deploy").outputs["details"]["action"] == "unchanged"
    assert get_deployment("churn")["generation"] == 1

    changed = run_pipeline(_pipeline(_deploy(model="churny@1", name="churn", replicas=2)))
    assert changed.step("deploy").outputs["details"]["action"] == "updated"
    dep = get_deployment("churn")
    assert dep["generation"] == 2 and dep["replicas"] == 2 and dep["max_batch_size"] == 1


def test_a_deleted_deployment_comes_back_on_rerun(run_id: str) -> None:
    spec = _pipeline(_deploy(model="churny@1"))
    assert run_pipeline(spec).ok
    delete_deployment("churny")  # the default name is the model's
    result = run_pipeline(spec)
    assert result.step("deploy").outputs["details"]["action"] == "created"
    assert get_deployment("churny")["model"] == "churny@1"


def test_deploy_from_a_register_step_pins_the_new_version(run_id: str) -> None:
    spec = _pipeline(
        {"name": "train", "uses": "test.fake_train", "with": {"run_id": run_id}},
        {"name": "register", "uses": "register", "with": {"from": "train", "name": "churny"}},
        _deploy(**{"from": "register", "name": "fresh"}),
    )
    result = run_pipeline(spec)
    assert result.ok, result.error
    registered = result.step("register").outputs["details"]["model"]
    assert get_deployment("fresh")["model"] == registered != "churny@1"


def test_a_model_directory_and_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIFAB_MODEL_ROOTS", str(tmp_path))
    (tmp_path / "lm").mkdir()
    spec = _pipeline(_deploy(model=str(tmp_path / "lm"), options={"max_tokens_limit": 64}))
    assert run_pipeline(spec).ok
    assert get_deployment("lm")["options"] == {"max_tokens_limit": 64}


@pytest.mark.parametrize(
    ("with_", "message"),
    [
        ({}, "exactly one of 'model' and 'from'"),
        ({"model": "churny@1", "from": "x"}, "exactly one of 'model' and 'from'"),
        ({"model": "churny@1", "backend": "tpu"}, "with.backend"),
        ({"model": "churny@1", "max_batch_size": 0}, "with.max_batch_size"),
        ({"model": "churny@1", "colour": "red"}, "with.colour: unknown key"),
        ({"model": "churny@1", "name": "Not OK"}, "name 'Not OK'"),
        ({"model": "nope@1"}, "model 'nope'"),
        ({"from": "register"}, "with.from: no earlier step 'register'"),
    ],
)
def test_bad_parameters_fail_the_step_naming_the_field(
    run_id: str, with_: dict[str, Any], message: str
) -> None:
    result = run_pipeline(_pipeline(_deploy(**with_)))
    assert not result.ok
    assert result.error is not None and "step 'deploy'" in result.error
    assert message in result.error
    assert result.exit_code in (1, 2)
    assert list_deployments() == []
