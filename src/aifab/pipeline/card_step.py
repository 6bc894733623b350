"""Pipeline step of the governance layer: ``card`` builds and attaches a model's card.

It runs again whenever the model version it resolves to, its owner file or its settings
change (an alias moved by a ``register`` step makes a new card for the new version).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from aifab.core.config import StrictConfig
from aifab.core.errors import InvalidInputError
from aifab.pipeline.spec import PreparedStep, StepContext, StepOutputs


class CardParams(StrictConfig):
    """``with`` of a ``card`` step."""

    model: str | None = Field(None, description="NAME@ALIAS or NAME@VERSION.")
    from_step: str | None = Field(
        None, alias="from", description="A register step whose new version to describe."
    )
    owner_file: str | None = Field(
        None, description="YAML with intended_use, limitations, owners, sensitive."
    )
    intended_use: str | None = Field(None, description="What the model is for.")
    limitations: str | None = Field(None, description="Where it should not be trusted.")
    sensitive: list[str] | None = Field(None, description="Columns for fairness and slices.")
    explain: bool = Field(True, description="Include the global explanation.")

    @model_validator(mode="after")
    def _one_source(self) -> CardParams:
        if (self.model is None) == (self.from_step is None):
            raise ValueError("give exactly one of 'model' and 'from'")
        return self


def card(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Build the card of a model version and attach it to the version."""
    from aifab.track.registry import resolve_model

    p = ctx.params(CardParams, params)
    ref = p.model
    if ref is None:
        earlier = ctx.step_outputs.get(p.from_step or "")
        if earlier is None or not earlier.get("details", {}).get("model"):
            raise InvalidInputError(f"with.from: step {p.from_step!r} registered no model")
        ref = str(earlier["details"]["model"])
    mv = resolve_model(ref)
    pinned = f"{mv['name']}@{mv['version']}"
    owner = ctx.path(p.owner_file) if p.owner_file else None
    if owner is not None and not owner.is_file():
        raise InvalidInputError(f"with.owner_file: {owner} does not exist")

    def run() -> StepOutputs:
        from aifab.ops.card.build import build_card

        result = build_card(
            pinned,
            owner,
            intended_use=p.intended_use,
            limitations=p.limitations,
            sensitive=p.sensitive,
            explain=p.explain,
        )
        return StepOutputs(
            artifacts=[result["path"]],
            details={"model": pinned, "path": result["path"], "uri": result["artifact_uri"]},
        )

    state = {"model": pinned, "params": p.model_dump(mode="json", by_alias=True)}
    return PreparedStep(run=run, files=[owner] if owner else [], state=state)
