"""``aifab agents``: define agents from YAML, run them, and read their traces."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import typer

from aifab.cli.output import JSON_HELP, emit, when

agents_app = typer.Typer(help="Agents: a chat model, tools and budgets; every run traced.")

_RUN_COLUMNS = ["id", "agent", "status", "steps", "tokens", "started", "answer"]
_STEP_COLUMNS = ["index", "kind", "name", "latency_ms", "tokens", "input", "output", "error"]
_GATEWAY_HELP = (
    "aifab server for the agent's default model and gateway tools (default: $AIFAB_GATEWAY_URL)."
)
_KEY_HELP = "Environment variable holding the API key sent to the gateway."


def _short(value: Any, limit: int = 60) -> str:
    import json

    text = "" if value is None else value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@agents_app.command("create")
def create_command(
    file: Path = typer.Option(..., "-f", "--file", help="The agent's YAML.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Create an agent from YAML, or replace its definition (the version grows)."""
    from aifab.agents import create_agent
    from aifab.core.config import load_yaml
    from aifab.core.errors import InvalidInputError

    raw = load_yaml(file)
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{file}: expected a mapping with name, model, tools, budgets")
    agent = create_agent(raw)
    emit(agent if as_json else {"name": agent["name"], "version": agent["version"]}, as_json)


@agents_app.command("list")
def list_command(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """List agents with their model and tools."""
    from aifab.agents import list_agents

    agents = list_agents()
    rows = [
        {
            "name": a["name"],
            "version": a["version"],
            "model": a["spec"]["model"]["model"],
            "tools": ", ".join(
                t.get("options", {}).get("name", t["use"]) for t in a["spec"]["tools"]
            ),
            "updated": when(a["updated_at"]),
        }
        for a in agents
    ]
    emit(agents if as_json else rows, as_json, ["name", "version", "model", "tools", "updated"])


@agents_app.command("show")
def show_command(
    name: str = typer.Argument(..., help="Agent name.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show an agent's definition."""
    from aifab.agents import get_agent

    emit(get_agent(name), as_json, title=f"agent {name}")


@agents_app.command("delete")
def delete_command(name: str = typer.Argument(..., help="Agent name.", show_default=False)) -> None:
    """Delete an agent (its runs and traces stay)."""
    from aifab.agents import delete_agent

    delete_agent(name)
    sys.stdout.write(f"deleted agent {name}\n")


@agents_app.command("run")
def run_command(
    name: str = typer.Argument(..., help="Agent name.", show_default=False),
    message: str = typer.Argument(..., help="The request.", show_default=False),
    gateway: str | None = typer.Option(None, "--gateway", help=_GATEWAY_HELP),
    key_env: str = typer.Option("AIFAB_API_KEY", "--key-env", help=_KEY_HELP),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Run an agent on one request; prints each step as it ends, then the answer."""
    from aifab.agents import ToolContext, run_agent
    from aifab.core.errors import InvalidInputError

    gateway_url = gateway or os.environ.get("AIFAB_GATEWAY_URL")
    if gateway_url and not os.environ.get(key_env):
        raise InvalidInputError(
            f"--gateway {gateway_url}: the gateway needs an API key: set ${key_env} to one "
            "(or name another variable with --key-env)"
        )
    ctx = ToolContext(gateway_url=gateway_url, api_key=os.environ.get(key_env))

    def show_step(step: dict[str, Any]) -> None:
        if not as_json:
            shown = step["error"] and f"error: {step['error']}" or _short(step["output"], 100)
            sys.stderr.write(f"[{step['index']}] {step['kind']} {step['name']}: {shown}\n")

    run = run_agent(name, message, ctx=ctx, on_step=show_step)
    if as_json:
        emit(run, True)
        return
    sys.stdout.write(f"{run['answer'] or ''}\n")
    sys.stderr.write(
        f"run {run['id']}: {run['status']}"
        + (f" ({run['reason']})" if run["reason"] else "")
        + f", {run['steps']} steps, {run['tokens']} tokens\n"
    )
    if run["status"] != "completed":
        raise typer.Exit(1)


@agents_app.command("runs")
def runs_command(
    agent: str | None = typer.Option(None, "--agent", help="Only this agent's runs."),
    limit: int = typer.Option(50, "-n", "--limit", help="How many, newest first."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """List agent runs, newest first."""
    from aifab.agents import list_runs

    runs = list_runs(agent, limit)
    rows = [{**r, "started": when(r["started_at"]), "answer": _short(r["answer"])} for r in runs]
    emit(runs if as_json else rows, as_json, _RUN_COLUMNS)


@agents_app.command("trace")
def trace_command(
    run_id: str = typer.Argument(..., help="Run id (aifab agents runs).", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show a run step by step: each model call and tool call with its input and output."""
    from aifab.agents import get_trace

    trace = get_trace(run_id)
    if as_json:
        emit(trace, True)
        return
    steps = [
        {**st, "input": _short(st["input"]), "output": _short(st["output"])}
        for st in trace["trace"]
    ]
    emit(steps, False, _STEP_COLUMNS, title=f"run {run_id}: {trace['status']}")
    sys.stdout.write(f"answer: {trace['answer'] or ''}\n")


@agents_app.command("eval-tools")
def eval_tools_command(
    model: str = typer.Argument(..., help="A registered LM (NAME@VERSION).", show_default=False),
    data: str = typer.Option(..., "--data", help="Dataset with messages and expected calls."),
    split: str = typer.Option("test", "--split", help="Rows to score."),
    limit: int = typer.Option(200, "--limit", help="Most rows scored."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Score an LM's tool calls on held-out requests (tool name, exact arguments) vs a baseline."""
    from aifab.agents import evaluate_tool_calls

    emit(evaluate_tool_calls(model, data, split=split, limit=limit), as_json)


def mcp_command(
    gateway: str | None = typer.Option(None, "--gateway", help=_GATEWAY_HELP),
    key_env: str = typer.Option("AIFAB_API_KEY", "--key-env", help=_KEY_HELP),
) -> None:
    """Serve aifab's tools (datasets, read-only SQL, predictions) over MCP on stdio."""
    from aifab.serve.mcp import serve_stdio

    serve_stdio(os.environ.get(key_env), gateway or os.environ.get("AIFAB_GATEWAY_URL"))


def register(app: typer.Typer) -> None:
    """Add the ``agents`` group and ``mcp`` to ``app``."""
    app.add_typer(agents_app, name="agents", no_args_is_help=True)
    app.command("mcp")(mcp_command)
