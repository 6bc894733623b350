"""Pipeline steps of the training layer: ``train`` (a recipe run as a job) and ``register``.

``train`` validates the recipe config up front, pins the datasets it names to what this run
produced, submits the job and runs it with an in-process worker until it is final.
``register`` puts the model of an earlier ``train`` step into the registry, with an alias.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from aifab.core.config import StrictConfig, load_yaml
from aifab.core.errors import AifabError, InvalidInputError
from aifab.data.catalog import VersionInfo
from aifab.pipeline.spec import PreparedStep, StepContext, StepOutputs

#: Recipe config keys that name datasets (``dataset``, ``valid_dataset``...).
_DATASET_KEY_SUFFIX = "dataset"
#: Recipe config keys that name a base model: a directory or a registered NAME[@VERSION|@ALIAS].
_MODEL_KEYS = ("base",)
#: How the recipes' plain progress lines start (``aifab.train.loop.Progress``).
_PROGRESS_PREFIX = "train step "


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


def _pin_models(config: dict[str, Any]) -> tuple[dict[str, str], list[Path]]:
    """Pin each base model the config names to the version it is now, in place.

    A registered base (``llm-base``) is a moving input: an earlier step of the same pipeline
    may just have registered a new version. Pinned to ``NAME@VERSION`` it is part of the cache
    key (a new base re-runs the fine-tune) and the job trains on exactly the version fingerprinted.

    Returns:
        The pinned refs by key (the step's state) and the base directories (fingerprinted files).
    """
    from aifab.core.errors import NotFoundError
    from aifab.track.registry import resolve_model
    from aifab.train.lifecycle import HUB_PREFIX

    pinned: dict[str, str] = {}
    dirs: list[Path] = []
    for key in _MODEL_KEYS:
        value = config.get(key)
        if not isinstance(value, str) or value.startswith(HUB_PREFIX):
            continue
        if Path(value).expanduser().is_dir():
            dirs.append(Path(value).expanduser())
            continue
        try:
            version = resolve_model(value)
        except (NotFoundError, InvalidInputError):
            continue  # the recipe's own check names what is wrong, with the key
        config[key] = pinned[key] = f"{version['name']}@{version['version']}"
    return pinned, dirs


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
    models, model_dirs = _pin_models(config)
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
        # The pipeline runs in the foreground: Ctrl-C cancels its job rather than leave it
        # queued for the next worker (which would run it again as attempt 2).
        final = run_until_final(
            job["id"], p.executor, cancel_on_interrupt=True, on_log=_progress_relay(ctx)
        )
        if final["state"] != "succeeded":
            raise AifabError(f"job {job['id']} {final['state']}: {final['reason']}")
        result = job_result(job["id"]) or {}
        kept = ("run_id", "metrics", "model_version", "registered_as")
        details: dict[str, Any] = {"job_id": job["id"]}
        details.update({k: result[k] for k in kept if k in result})
        model_dir = result.get("model_dir")
        return StepOutputs(artifacts=[model_dir] if model_dir else [], details=details)

    return PreparedStep(run=run, datasets=datasets, files=files + model_dirs, state=models)


def _progress_relay(ctx: StepContext) -> Callable[[str], None] | None:
    """Pass the job log's progress lines (``train step ...``) on to ``ctx.say``, named."""
    say = ctx.say
    if say is None:
        return None

    def relay(line: str) -> None:
        if line.startswith(_PROGRESS_PREFIX):
            say(f"  {ctx.step}: {line}")

    return relay


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
