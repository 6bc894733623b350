"""Pipeline step of the serving layer: ``deploy`` creates or updates a deployment.

The step always runs (the deployment lives in the DB, which a fingerprint of the step's
inputs cannot see) and is idempotent: the same settings leave the deployment untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from aifab.core.config import StrictConfig
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.pipeline.spec import PreparedStep, StepContext, StepOutputs


class DeployParams(StrictConfig):
    """``with`` of a ``deploy`` step: a model (or an earlier ``register`` step) and settings."""

    model: str | None = Field(None, description="NAME@ALIAS, NAME@VERSION or a model dir.")
    from_step: str | None = Field(
        None, alias="from", description="A register step whose new version to deploy."
    )
    name: str | None = Field(None, description="Deployment name (default: the model's name).")
    replicas: int = Field(1, ge=1, le=16, description="Worker threads running the model.")
    max_batch_size: int = Field(1, ge=1, le=1024, description="Most items per model call.")
    max_wait_ms: float = Field(0.0, ge=0, le=1000, description="Longest wait for a batch, ms.")
    backend: str = Field("torch", pattern="^(torch|onnx)$", description="torch or onnx.")
    options: dict[str, Any] = Field(default_factory=dict, description="Handler options.")

    @model_validator(mode="after")
    def _one_source(self) -> DeployParams:
        if (self.model is None) == (self.from_step is None):
            raise ValueError("give exactly one of 'model' and 'from'")
        return self


def _source(ctx: StepContext, p: DeployParams) -> str:
    """The model to deploy: ``model`` as given, or the version a register step made."""
    if p.model is not None:
        return p.model
    earlier = ctx.step_outputs.get(p.from_step or "")
    model = (earlier or {}).get("details", {}).get("model")
    if earlier is None:
        raise InvalidInputError(f"with.from: no earlier step {p.from_step!r} produced outputs")
    if not model:
        raise InvalidInputError(f"with.from: step {p.from_step!r} registered no model")
    return str(model)  # NAME@VERSION: deploy exactly what this run registered


def deploy(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Create the deployment, or update it to these settings (no change: nothing happens)."""
    p = ctx.params(DeployParams, params)
    source = _source(ctx, p)

    def run() -> StepOutputs:
        from aifab.inference.deployments import (
            create_deployment,
            default_name,
            get_deployment,
            update_deployment,
        )

        name = p.name or default_name(source)
        settings: dict[str, Any] = {
            "replicas": p.replicas,
            "max_batch_size": p.max_batch_size,
            "max_wait_ms": p.max_wait_ms,
            "backend": p.backend,
            "options": dict(p.options),
        }
        try:
            before = get_deployment(name)
        except NotFoundError:
            dep = create_deployment(source, name=name, **settings)
            action = "created"
        else:
            dep = update_deployment(name, model=source, **settings)
            action = "updated" if dep["generation"] != before["generation"] else "unchanged"
        details = {"deployment": name, "model": dep["model"], "action": action}
        return StepOutputs(details={**details, "generation": dep["generation"]})

    return PreparedStep(run=run, state={"model": source}, always_run=True)
