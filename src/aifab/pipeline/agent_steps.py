"""Pipeline step ``tool_eval``: score an LM's tool calls on a dataset's held-out split."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from aifab.core.config import StrictConfig
from aifab.pipeline.spec import PreparedStep, StepContext, StepOutputs


class ToolEvalParams(StrictConfig):
    """``with`` of a ``tool_eval`` step."""

    model: str = Field(description="A registered LM: NAME, NAME@VERSION or NAME@ALIAS.")
    data: str = Field(description="Dataset with messages and expected calls.")
    split: str = Field("test", description="Rows to score.")
    limit: int = Field(200, ge=1, le=100_000, description="Most rows scored.")


def tool_eval(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Tool-name accuracy and argument exact match, beside the most-common-call baseline."""
    p = ctx.params(ToolEvalParams, params)
    version = ctx.dataset(p.data)

    def run() -> StepOutputs:
        from aifab.agents import evaluate_tool_calls

        return StepOutputs(
            details=evaluate_tool_calls(p.model, version.ref, split=p.split, limit=p.limit)
        )

    # Always runs: the model behind a name can change without the step's inputs changing.
    return PreparedStep(run=run, datasets=[version], always_run=True)
