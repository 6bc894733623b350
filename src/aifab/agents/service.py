"""Agent service functions: define agents, run them, read their traces.

Definitions and traces live in the metadata DB. A run's steps are queued as they happen and
committed in batches (:mod:`aifab.agents.trace_writer`), so a run cut short (a crash, a closed
stream) still leaves the trace of what it did, up to its last quarter of a second.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from aifab.agents.chat import ChatModel, OpenAIChat
from aifab.agents.loop import Step, run_loop
from aifab.agents.spec import AgentSpec
from aifab.agents.tables import AgentRow, AgentRunRow, AgentStepRow
from aifab.agents.tools import BUILTIN_TOOLS, Tool, ToolContext, may_use
from aifab.agents.trace_writer import trace_writer
from aifab.core.actor import current_actor
from aifab.core.audit import record_event
from aifab.core.config import parse_config
from aifab.core.db import lock_aggregate, session_scope
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.core.ids import new_id

__all__ = [
    "build_tools",
    "create_agent",
    "delete_agent",
    "get_agent",
    "get_trace",
    "list_agents",
    "list_runs",
    "parse_spec",
    "run_agent",
    "step_dict",
]

#: Characters of a step's input or output kept in the trace.
_TRACE_CHARS = 65_536


def parse_spec(raw: dict[str, Any]) -> AgentSpec:
    """Validate an agent's YAML mapping; errors name the field."""
    return parse_config(AgentSpec, raw, "agent spec")


def _agent_dict(row: AgentRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "version": row.version,
        "spec": row.spec,
        "created_by": row.created_by,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def create_agent(raw: dict[str, Any]) -> dict[str, Any]:
    """Create an agent, or replace its definition (its version grows); audited."""
    spec = parse_spec(raw)
    for tool in spec.tools:
        if tool.use not in BUILTIN_TOOLS:
            known = ", ".join(BUILTIN_TOOLS.names())
            raise InvalidInputError(f"agent spec: tools: unknown tool {tool.use!r} ({known})")
    build_tools(spec, ToolContext())  # bad tool options are refused now, not at the first run
    data = spec.model_dump(mode="json")
    now = time.time()
    with session_scope() as s:
        lock_aggregate(s, "agent", spec.name)  # its version counts up, from the first create
        row = s.get(AgentRow, spec.name)
        if row is None:
            row = AgentRow(name=spec.name, spec=data, version=1, created_by=current_actor())
            row.created_at = row.updated_at = now
            s.add(row)
            action = "agent.create"
        else:
            row.spec, row.version, row.updated_at = data, row.version + 1, now
            action = "agent.update"
        s.flush()
        record_event(s, action, f"agent:{spec.name}", data)
        return _agent_dict(row)


def get_agent(name: str) -> dict[str, Any]:
    """One agent's definition and version."""
    with session_scope(readonly=True) as s:
        row = s.get(AgentRow, name)
        if row is None:
            raise NotFoundError(f"no agent named {name!r} (aifab agents list)")
        return _agent_dict(row)


def list_agents() -> list[dict[str, Any]]:
    """Every agent, by name."""
    with session_scope(readonly=True) as s:
        return [_agent_dict(r) for r in s.scalars(select(AgentRow).order_by(AgentRow.name))]


def delete_agent(name: str) -> None:
    """Delete an agent's definition (its runs and traces stay); audited."""
    with session_scope() as s:
        row = s.get(AgentRow, name)
        if row is None:
            raise NotFoundError(f"no agent named {name!r}")
        s.delete(row)
        record_event(s, "agent.delete", f"agent:{name}")


def build_tools(spec: AgentSpec, ctx: ToolContext) -> dict[str, Tool]:
    """The agent's tools that the caller may use, built from their YAML options for this run.

    A tool the caller's role may not use (:func:`~aifab.agents.tools.may_use`, the rule MCP
    sessions follow) is not offered to the model.
    """
    tools: dict[str, Tool] = {}
    for tool_spec in spec.tools:
        if not may_use(tool_spec.use, ctx.permissions):
            continue
        tool = BUILTIN_TOOLS.get(tool_spec.use)(tool_spec.options, ctx)
        tools[tool.name] = tool
    return tools


def _model_for(spec: AgentSpec, ctx: ToolContext) -> ChatModel:
    endpoint = spec.model
    if endpoint.local:
        from aifab.agents.local_chat import LocalChat

        return LocalChat(
            endpoint.model, endpoint.temperature, endpoint.grounded_numbers is not False
        )
    if endpoint.base_url:
        key = os.environ.get(endpoint.api_key_env) if endpoint.api_key_env else None
        if endpoint.api_key_env and key is None:
            raise InvalidInputError(f"agent {spec.name}: ${endpoint.api_key_env} is not set")
        return OpenAIChat(
            endpoint.base_url,
            endpoint.model,
            key,
            endpoint.temperature,
            bool(endpoint.grounded_numbers),
        )
    if ctx.gateway_url is None:
        raise InvalidInputError(
            f"agent {spec.name}: model.base_url is not set and no gateway was given "
            "(--gateway URL, or run it through `aifab serve`)"
        )
    base = ctx.gateway_url.rstrip("/") + "/v1"
    grounded = endpoint.grounded_numbers is not False
    return OpenAIChat(base, endpoint.model, ctx.api_key, endpoint.temperature, grounded)


def _instructions(spec: AgentSpec, user_input: str) -> str:
    """The system message: the registered prompt rendered, or the spec's instructions."""
    if spec.prompt is None:
        return spec.instructions
    from aifab.prompts import get_prompt, render_prompt

    declared = set(get_prompt(spec.prompt)["variables"])
    text: str = render_prompt(spec.prompt, {"input": user_input} if "input" in declared else {})[
        "text"
    ]
    return text


def _bounded(value: Any) -> Any:
    text = json.dumps(value, default=str)
    if len(text) <= _TRACE_CHARS:
        return json.loads(text)
    return {"truncated": True, "text": text[:_TRACE_CHARS]}


def _save_step(run_id: str, step: Step, shown: dict[str, Any] | None = None) -> None:
    """Queue ``step``'s row; ``shown`` is its :func:`step_dict` when a stream already made it."""
    ts = time.time()

    def write(s: Session) -> None:
        # Bounding (a JSON round trip) runs on the writer's thread, while the loop waits on I/O,
        # unless a stream has bounded the step already.
        s.add(
            AgentStepRow(
                run_id=run_id,
                idx=step.index,
                kind=step.kind,
                name=step.name[:100],
                input=_bounded(step.input) if shown is None else shown["input"],
                output=_bounded(step.output) if shown is None else shown["output"],
                error=step.error,
                latency_ms=step.latency_ms,
                tokens=step.tokens,
                ts=ts,
            )
        )

    trace_writer().apply(write)


def step_dict(step: Step) -> dict[str, Any]:
    """A step as JSON-ready data (what traces and streams show)."""
    return {
        "index": step.index,
        "kind": step.kind,
        "name": step.name,
        "input": _bounded(step.input),
        "output": _bounded(step.output),
        "error": step.error,
        "latency_ms": round(step.latency_ms, 3),
        "tokens": step.tokens,
    }


def run_agent(
    name: str,
    user_input: str,
    *,
    ctx: ToolContext | None = None,
    model: ChatModel | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run agent ``name`` on one request and store its trace.

    Args:
        name: the agent.
        user_input: the user's message.
        ctx: the gateway and the caller's key (for gateway tools and the default model).
        model: the chat model to use instead of the one the spec names (tests, embedding).
        on_step: called with each step (as :func:`step_dict`) as soon as it ends.

    Returns:
        The run: id, status, answer, reason, tokens, steps.
    """
    if not user_input.strip():
        raise InvalidInputError("input: the agent needs a non-empty message")
    agent = get_agent(name)
    spec = parse_spec(agent["spec"])
    ctx = ctx or ToolContext()
    tools = build_tools(spec, ctx)
    chat = model or _model_for(spec, ctx)
    run_id = new_id("run")
    # Kept after its insert (sessions keep no expiry on commit): the reply is read from it.
    run = AgentRunRow(
        id=run_id,
        agent=name,
        agent_version=agent["version"],
        actor=current_actor(),
        status="running",
        input=user_input,
        tokens=0,
        steps=0,
        started_at=time.time(),
    )
    with session_scope() as s:
        s.add(run)
        record_event(s, "agent.run", f"agent:{name}", {"run": run_id})

    def step_done(step: Step) -> None:
        if on_step is None:
            _save_step(run_id, step)
            return
        shown = step_dict(step)  # bounded once, for the stream and the trace alike
        _save_step(run_id, step, shown)
        on_step({"run_id": run_id, **shown})

    system = _instructions(spec, user_input)
    # Empty instructions send no system turn (a model tuned on the tools prompt alone sees
    # exactly the conversations it learned from).
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": user_input})
    result = run_loop(
        chat,
        tools,
        messages,
        spec.budgets,
        max_tokens_per_call=spec.model.max_tokens,
        model_timeout_s=spec.model.timeout_s,
        on_step=step_done,
    )
    ended = {
        "status": result.status,
        "answer": result.answer,
        "reason": result.reason,
        "tokens": result.tokens,
        "steps": len(result.steps),
        "ended_at": time.time(),
    }
    for column, value in ended.items():  # the detached row answers the caller
        setattr(run, column, value)

    def finish(s: Session) -> None:
        row = s.get(AgentRunRow, run_id)
        assert row is not None
        for column, value in ended.items():
            setattr(row, column, value)

    # The run's end commits with its last steps, in one transaction; if that write failed
    # (it was logged), it is done again here so that the caller sees the error.
    writer = trace_writer()
    ticket = writer.apply(finish)
    if not writer.flush() or writer.failed(ticket):
        with session_scope() as s:
            finish(s)
    return _run_dict(run)


def _run_dict(row: AgentRunRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "agent": row.agent,
        "agent_version": row.agent_version,
        "actor": row.actor,
        "status": row.status,
        "input": row.input,
        "answer": row.answer,
        "reason": row.reason,
        "tokens": row.tokens,
        "steps": row.steps,
        "started_at": row.started_at,
        "ended_at": row.ended_at,
    }


def list_runs(agent: str | None = None, limit: int = 50, offset: int = 0) -> list[dict[str, Any]]:
    """The newest runs (of one agent), newest first; ``offset`` skips the newest that many."""
    query = (
        select(AgentRunRow)
        .order_by(AgentRunRow.started_at.desc(), AgentRunRow.id.desc())
        .limit(limit)
        .offset(max(0, offset))
    )
    if agent:
        query = query.where(AgentRunRow.agent == agent)
    with session_scope(readonly=True) as s:
        return [_run_dict(r) for r in s.scalars(query)]


def get_trace(run_id: str) -> dict[str, Any]:
    """A run with every step, in order."""
    with session_scope(readonly=True) as s:
        row = s.get(AgentRunRow, run_id)
        if row is None:
            raise NotFoundError(f"no agent run {run_id!r} (aifab agents runs)")
        steps = s.scalars(
            select(AgentStepRow).where(AgentStepRow.run_id == run_id).order_by(AgentStepRow.idx)
        )
        return {
            **_run_dict(row),
            "trace": [
                {
                    "index": st.idx,
                    "kind": st.kind,
                    "name": st.name,
                    "input": st.input,
                    "output": st.output,
                    "error": st.error,
                    "latency_ms": st.latency_ms,
                    "tokens": st.tokens,
                }
                for st in steps
            ],
        }
