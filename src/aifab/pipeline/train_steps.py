"""Pipeline steps of the training layer: ``train`` (a recipe run as a job) and ``register``.

``train`` validates the recipe config up front, pins the datasets it names to what this run
produced, submits the job and runs it with an in-process worker until it is final.
``register`` puts the model of an earlier ``train`` step into the registry, with an alias.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from aifab.core.config import StrictConfig, load_yaml
from aifab.core.errors import AifabError, InvalidInputError
from aifab.data.catalog import VersionInfo
from aifab.pipeline.spec import PreparedStep, StepContext, StepOutputs

#: Recipe config keys that name datasets (``dataset``, ``valid_dataset``...).
_DATASET_KEY_SUFFIX = "dataset"


class TrainParams(StrictConfig):
    """``with`` of a ``train`` step."""

    recipe: str = Field(description="Recipe name: classify, lm, lora, kge or custom.")
    config: str | dict[str, Any] = Field(
        default_factory=dict, description="Recipe config: a YAML file or an inline mapping."
    )
    overrides: list[str] = Field(default_factory=list, description="dotted.key=value items.")
    replicas: int = Field(1, ge=1, description="Data-parallel replicas.")
    resources: dict[str, Any] | None = Field(None, description="Per replica: cpu, memory, gpu.")
    executor: str = Field("local", description="Executor the job runs on.")
    queue: str = Field("default", description="Queue of the job.")


class RegisterParams(StrictConfig):
    """``with`` of a ``register`` step."""

    from_step: str = Field(alias="from", description="The train step whose model to register.")
    name: str = Field(description="Registered model name.")
    alias: str | None = Field(None, description="Alias to point at the new version.")
    artifact_path: str = Field("model", description="Run artifact folder holding the model.")


def _pin_datasets(ctx: StepContext, config: dict[str, Any]) -> list[VersionInfo]:
    """Resolve every ``*dataset`` key of the config, pinned to this run's outputs, in place."""
    versions = []
    for key, value in config.items():
        if key.endswith(_DATASET_KEY_SUFFIX) and isinstance(value, str):
            v = ctx.dataset(value)
            config[key] = v.ref
            versions.append(v)
    return versions


def train(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Run a training recipe as a job and wait for it (the model dir is the step's artifact)."""
    from aifab.train.submit import apply_overrides, build_job_spec

    p = ctx.params(TrainParams, params)
    files: list[Path] = []
    if isinstance(p.config, str):
        path = ctx.path(p.config)
        files.append(path)
        raw = load_yaml(path)
        if not isinstance(raw, dict):
            raise InvalidInputError(f"{path}: a recipe config must be a mapping")
    else:
        raw = dict(p.config)
    config = apply_overrides(raw, p.overrides)
    datasets = _pin_datasets(ctx, config)
    spec = build_job_spec(
        p.recipe,
        config,
        name=f"{ctx.pipeline}-{ctx.step}"[:63].lower(),
        replicas=p.replicas,
        resources=p.resources,
        job={"queue": p.queue, "executor": p.executor},
    )

    def run() -> StepOutputs:
        from aifab.jobs.service import job_result, submit
        from aifab.jobs.worker import run_until_final

        job = submit(spec)
        final = run_until_final(job["id"], p.executor)
        if final["state"] != "succeeded":
            raise AifabError(f"job {job['id']} {final['state']}: {final['reason']}")
        result = job_result(job["id"]) or {}
        kept = ("run_id", "metrics", "model_version", "registered_as")
        details: dict[str, Any] = {"job_id": job["id"]}
        details.update({k: result[k] for k in kept if k in result})
        model_dir = result.get("model_dir")
        return StepOutputs(artifacts=[model_dir] if model_dir else [], details=details)

    return PreparedStep(run=run, datasets=datasets, files=files)


def register(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Register the model of an earlier ``train`` step (and move an alias to it)."""
    p = ctx.params(RegisterParams, params)
    earlier = ctx.step_outputs.get(p.from_step)
    if earlier is None:
        raise InvalidInputError(f"with.from: no earlier step {p.from_step!r} produced outputs")
    run_id = earlier.get("details", {}).get("run_id")
    if not run_id:
        raise InvalidInputError(f"with.from: step {p.from_step!r} recorded no MLflow run")

    def run() -> StepOutputs:
        from aifab.track.registry import register_model, set_alias

        mv = register_model(run_id, p.artifact_path, p.name)
        if p.alias:
            set_alias(p.name, p.alias, mv["version"])
        return StepOutputs(
            details={"model": f"{p.name}@{mv['version']}", "run_id": run_id, "alias": p.alias}
        )

    return PreparedStep(run=run, state={"run_id": run_id})
