"""Every YAML file shipped in examples/ is a valid instance of the config it stands for."""

from __future__ import annotations

from pathlib import Path

import pytest

from aifab.core.config import load_config, load_yaml
from aifab.core.registry import load_target
from aifab.jobs.spec import JobSpec
from aifab.pipeline.spec import load_pipeline

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
#: The config model of a transform step's ``with.spec`` file, by step type.
SPEC_MODELS = {
    "clean": "aifab.data.clean:CleanSpec",
    "validate": "aifab.data.validate:ExpectationSuite",
    "label": "aifab.data.label:LabelSpec",
    "split": "aifab.data.splits:SplitSpec",
    "features": "aifab.data.features:FeatureSpec",
}


def _yaml_files() -> list[Path]:
    return sorted(EXAMPLES.rglob("*.yaml"))


def test_examples_ship_yaml() -> None:
    assert any(p.name == "pipeline.yaml" for p in _yaml_files())


@pytest.mark.parametrize("path", _yaml_files(), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_shipped_yaml_validates(path: Path) -> None:
    data = load_yaml(path)
    if path.name == "pipeline.yaml" or (isinstance(data, dict) and {"name", "steps"} <= set(data)):
        pipeline = load_pipeline(path)
        for step in pipeline.steps:
            spec = step.with_.get("spec")
            if isinstance(spec, str) and step.uses in SPEC_MODELS:
                load_config(load_target(SPEC_MODELS[step.uses]), path.parent / spec)
            if step.uses == "deploy":
                from aifab.pipeline.serve_steps import DeployParams
                from aifab.pipeline.spec import validate_params

                validate_params(DeployParams, step.with_, f"step {step.name!r}: with")
            if step.uses == "train":
                from aifab.train.submit import load_recipe_config

                config = step.with_.get("config") or {}
                if isinstance(config, str):
                    config = path.parent / config
                load_recipe_config(step.with_["recipe"], config, step.with_.get("overrides", []))
        return
    if path.parent.name == "jobs":
        load_config(JobSpec, path)
        return
    if path.parent.name == "agents":
        from aifab.agents import AgentSpec

        load_config(AgentSpec, path)
        return
    if path.name == "sweep.yaml":
        from aifab.train.hpo_spec import SweepSpec

        load_config(SweepSpec, path)
        return
    if path.parent.name == "drift":
        from aifab.ops.monitor_spec import MonitorSpec
        from aifab.ops.policy.service import load_policy_spec

        if path.name == "monitor.yaml":
            load_config(MonitorSpec, path)
        else:
            load_policy_spec(path)  # reads its retrain config too
        return
    assert isinstance(load_yaml(path), dict)  # a spec file: checked through its pipeline
