"""Pipeline steps of agents: ``tool_eval`` scores an LM's tool calls, ``agent`` runs an agent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from aifab.core.config import StrictConfig
from aifab.core.errors import AifabError
from aifab.pipeline.spec import PreparedStep, StepContext, StepOutputs


class ToolEvalParams(StrictConfig):
    """``with`` of a ``tool_eval`` step."""

    model: str = Field(description="A registered LM: NAME, NAME@VERSION or NAME@ALIAS.")
    data: str = Field(description="Dataset with messages and expected calls.")
    split: str = Field("test", description="Rows to score.")
    limit: int = Field(200, ge=1, le=100_000, description="Most rows scored.")


class AgentParams(StrictConfig):
    """``with`` of an ``agent`` step."""

    agent: str = Field(description="The agent's YAML (relative to the pipeline file).")
    input: str = Field(min_length=1, description="The request the agent answers.")


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


def agent(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Define (or update) the agent from its YAML and run it once; a failed run fails the step.

    A run that ends at a budget still succeeds as a step: its trace is what it produced.
    """
    p = ctx.params(AgentParams, params)
    path = ctx.path(p.agent)

    def run() -> StepOutputs:
        from aifab.agents import ToolContext, create_agent, run_agent
        from aifab.core.config import load_yaml

        raw = load_yaml(path)
        if not isinstance(raw, dict):
            raise AifabError(f"{path}: expected an agent mapping (name, model, tools, budgets)")
        name = create_agent(raw)["name"]
        result = run_agent(name, p.input, ctx=ToolContext())
        if result["status"] == "failed":
            raise AifabError(f"agent {name}: the run failed: {result['reason']}")
        keys = ("id", "status", "reason", "steps", "tokens", "answer")
        return StepOutputs(details={k: result[k] for k in keys})

    return PreparedStep(run=run, files=[path], always_run=True)
