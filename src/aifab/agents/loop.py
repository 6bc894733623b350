"""The function-calling loop: ask the model, run the tools it calls, feed results back, repeat.

It stops at a final answer, a model failure or the first budget reached (steps, tokens, wall
time), and reports every model call and tool call as a :class:`Step` as it happens. Tool
output is data for the model: it goes back as a ``tool`` message and is never executed or
parsed for instructions; a call to a tool the agent was not given is a recorded fault. An
empty final answer is a fault too: the model is asked once more, without tools, and a second
empty answer fails the run.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aifab.agents.chat import ChatModel, ModelCallError, ToolCall
from aifab.agents.spec import Budgets
from aifab.agents.tools import Tool, ToolError, check_arguments

__all__ = ["ANSWER_NUDGE", "LoopResult", "Step", "run_loop"]

#: Sent (with no tools offered) when the model answered with nothing: one retry, then a fault.
ANSWER_NUDGE = "Answer the question now in plain words, using the tool results above."


@dataclass
class Step:
    """One model call or tool call of a run."""

    index: int
    kind: str  # "model" | "tool"
    name: str
    input: Any
    output: Any = None
    error: str | None = None
    latency_ms: float = 0.0
    tokens: int = 0


@dataclass
class LoopResult:
    """How a run ended."""

    status: str  # "completed" | "budget_exceeded" | "failed"
    answer: str | None
    reason: str | None = None
    tokens: int = 0
    steps: list[Step] = field(default_factory=list)


def _tool_message(call: ToolCall, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.id, "content": content}


def _run_tool(tool: Tool | None, call: ToolCall) -> tuple[Any, str | None]:
    if tool is None:
        return None, f"tool {call.name!r} is not available to this agent"
    try:
        args = check_arguments(tool, call.arguments)
        return tool.fn(**args), None
    except ToolError as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - a failing tool is reported to the model
        return None, f"{type(exc).__name__}: {exc}"


class _Run:
    """The state of one run: messages, spent budget, steps."""

    def __init__(
        self, tools: dict[str, Tool], budgets: Budgets, on_step: Callable[[Step], None]
    ) -> None:
        self.tools = tools
        self.budgets = budgets
        self.on_step = on_step
        self.started = time.monotonic()
        self.tokens = 0
        self.steps: list[Step] = []

    def left_s(self) -> float:
        return self.budgets.max_seconds - (time.monotonic() - self.started)

    def add(self, step: Step) -> None:
        self.steps.append(step)
        self.on_step(step)

    def call_tools(self, calls: list[ToolCall]) -> list[dict[str, Any]]:
        """Run the calls in parallel, each within the tool timeout; one message per call."""
        pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=len(calls), thread_name_prefix="aifab-agent-tool"
        )
        started = time.perf_counter()
        futures = [pool.submit(_run_tool, self.tools.get(c.name), c) for c in calls]
        timeout = min(self.budgets.tool_timeout_s, max(self.left_s(), 0.001))
        messages = []
        for call, future in zip(calls, futures, strict=True):
            try:
                output, error = future.result(
                    timeout=max(timeout - (time.perf_counter() - started), 0)
                )
            except concurrent.futures.TimeoutError:
                output, error = None, f"tool {call.name} timed out after {timeout:g} s"
            step = Step(len(self.steps), "tool", call.name, call.arguments, output, error)
            step.latency_ms = (time.perf_counter() - started) * 1000
            self.add(step)
            text = f"error: {error}" if error else json.dumps(output, default=str)
            messages.append(_tool_message(call, text[: self.budgets.max_tool_output]))
        # A hung tool is abandoned rather than awaited: the run must end within its budget.
        pool.shutdown(wait=False)
        return messages


def run_loop(
    model: ChatModel,
    tools: dict[str, Tool],
    messages: list[dict[str, Any]],
    budgets: Budgets,
    *,
    max_tokens_per_call: int = 256,
    model_timeout_s: float = 60.0,
    on_step: Callable[[Step], None] = lambda step: None,
) -> LoopResult:
    """Run the agent loop until an answer or a budget.

    Args:
        model: the chat model.
        tools: the tools the agent was given, by name.
        messages: the conversation so far (system and user messages).
        budgets: the run's limits.
        max_tokens_per_call: the most tokens one model call may generate.
        model_timeout_s: the longest one model call may take (also bounded by the wall budget).
        on_step: called with each step as soon as it ends (traces, streaming).

    Returns:
        The outcome; it never raises for a model or tool failure.
    """
    run = _Run(tools, budgets, on_step)
    specs = [t.openai() for t in tools.values()]
    retried = False
    messages = list(messages)
    for _ in range(budgets.max_steps):
        if run.left_s() <= 0:
            return LoopResult("budget_exceeded", None, "wall time", run.tokens, run.steps)
        step = Step(len(run.steps), "model", "chat", {"messages": len(messages)})
        started = time.perf_counter()
        try:
            reply = model.complete(
                messages,
                specs,
                max_tokens=max(1, min(max_tokens_per_call, budgets.max_tokens - run.tokens)),
                timeout_s=min(model_timeout_s, run.left_s()),
            )
        except ModelCallError as exc:
            step.error, step.latency_ms = str(exc), (time.perf_counter() - started) * 1000
            run.add(step)
            return LoopResult("failed", None, str(exc), run.tokens, run.steps)
        step.latency_ms = (time.perf_counter() - started) * 1000
        step.tokens = reply.total_tokens
        step.output = {
            "content": reply.content,
            "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in reply.tool_calls],
        }
        run.tokens += reply.total_tokens
        empty = not reply.tool_calls and not (reply.content or "").strip()
        if empty:
            step.error = "empty final answer"
        run.add(step)
        if not reply.tool_calls and not empty:
            return LoopResult("completed", reply.content, None, run.tokens, run.steps)
        if empty:
            # An empty answer is a fault, never a finished run: ask once more for words.
            if retried or run.left_s() <= 0 or run.tokens >= budgets.max_tokens:
                reason = "the model gave an empty final answer" + (" twice" if retried else "")
                return LoopResult("failed", None, reason, run.tokens, run.steps)
            retried = True
            messages.append({"role": "user", "content": ANSWER_NUDGE})
            specs = []  # no tools on the retry: the model must answer in words
            continue
        if run.tokens >= budgets.max_tokens:
            return LoopResult("budget_exceeded", None, "tokens", run.tokens, run.steps)
        calls = reply.tool_calls[: budgets.max_tool_calls]
        messages.append(
            {
                "role": "assistant",
                "content": reply.content,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for c in calls
                ],
            }
        )
        messages.extend(run.call_tools(calls))
    return LoopResult("budget_exceeded", None, "steps", run.tokens, run.steps)
