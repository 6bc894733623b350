"""An agent's YAML: the model endpoint it talks to, its instructions, its tools and budgets."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from aifab.core.config import StrictConfig
from aifab.core.names import NAME_RULE, SHORT_NAME, is_full_match

__all__ = ["MAX_OPTION_DEPTH", "AgentSpec", "Budgets", "ModelEndpoint", "ToolSpec"]

#: Deepest nesting of lists and mappings in a tool's options (a tool needs two or three levels;
#: hundreds would reach the serializer's recursion limit as a 500).
MAX_OPTION_DEPTH = 16


def _depth(value: Any) -> int:
    """How deeply lists and mappings nest in ``value``, counted without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list | tuple):
            if level + 1 > MAX_OPTION_DEPTH:
                return level + 1  # deep enough to refuse: no need to walk the rest
            deepest = max(deepest, level + 1)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


class ModelEndpoint(StrictConfig):
    """Where the agent's chat model answers: an aifab deployment or any OpenAI-compatible API."""

    model: str = Field(
        description="Deployment name sent as the request's `model`; with `local: true`, a "
        "registered LM (NAME, NAME@VERSION or NAME@ALIAS) run in this process."
    )
    local: bool = Field(
        False, description="Run the registered model in-process: no server or endpoint needed."
    )
    base_url: str | None = Field(
        None,
        description="OpenAI-compatible base URL ending in /v1; default: the aifab gateway "
        "the agent runs on, called with the caller's key.",
    )
    api_key_env: str | None = Field(
        None, description="Environment variable holding the key for `base_url`."
    )
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature.")
    grounded_numbers: bool | None = Field(
        None,
        description="An answer after tool results writes only numbers of the question and the "
        "results, digit for digit (decoding enforces it). Default: on for an aifab model "
        "(`local`, or the gateway), off for a `base_url`, which may not know the option.",
    )
    max_tokens: int = Field(256, ge=1, le=32_768, description="Most tokens per model call.")
    timeout_s: float = Field(60.0, gt=0, le=600, description="Longest one model call may take.")


class ToolSpec(StrictConfig):
    """A built-in tool by name, with its options."""

    use: str = Field(description="Built-in tool: sql, predict, http_get or kb_search.")
    options: dict[str, Any] = Field(default_factory=dict, description="The tool's options.")

    @field_validator("options")
    @classmethod
    def _shallow(cls, value: dict[str, Any]) -> dict[str, Any]:
        if _depth(value) > MAX_OPTION_DEPTH:
            raise ValueError(f"options are nested more than {MAX_OPTION_DEPTH} levels deep")
        return value


class Budgets(StrictConfig):
    """Limits of one run; the run stops cleanly (status ``budget_exceeded``) at the first."""

    max_steps: int = Field(8, ge=1, le=100, description="Most model calls.")
    max_tokens: int = Field(8_000, ge=1, le=1_000_000, description="Most tokens, all calls.")
    max_seconds: float = Field(120.0, gt=0, le=3_600, description="Longest wall time.")
    tool_timeout_s: float = Field(20.0, gt=0, le=600, description="Longest one tool call.")
    max_tool_calls: int = Field(8, ge=1, le=64, description="Most tool calls per model step.")
    max_tool_output: int = Field(
        16_000, ge=100, le=1_000_000, description="Characters of a tool's output the model sees."
    )


class AgentSpec(StrictConfig):
    """One agent: ``aifab agents create -f agent.yaml``."""

    name: str = Field(description="The agent's name.")
    description: str = Field("", description="What the agent is for.")
    model: ModelEndpoint = Field(description="The chat model the agent thinks with.")
    instructions: str = Field(
        "You are a helpful assistant. Use the tools when they help; answer briefly.",
        description="The system message (unless `prompt` is given).",
    )
    prompt: str | None = Field(
        None,
        description="A registered prompt (NAME@ALIAS or NAME@VERSION) rendered as the system "
        "message; it may declare the variable `input` (the user's message).",
    )
    tools: list[ToolSpec] = Field(default_factory=list, description="Built-in tools it may call.")
    budgets: Budgets = Field(default_factory=Budgets, description="Per-run limits.")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not is_full_match(SHORT_NAME, value):
            raise ValueError(f"{NAME_RULE}; at most 100 characters for an agent")
        return value

    @field_validator("tools")
    @classmethod
    def _unique_tools(cls, value: list[ToolSpec]) -> list[ToolSpec]:
        names = [t.options.get("name", t.use) for t in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"tool names must be unique: {', '.join(dupes)}")
        return value
