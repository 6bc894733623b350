"""``aifab policy``: the closed loop (drift or quality alert -> retrain -> gate -> canary)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from aifab.cli.output import JSON_HELP, emit, when

policy_app = typer.Typer(help="Retrain policies: alert -> retrain -> gate -> canary -> promote.")


def _print_record(run: dict[str, Any]) -> None:
    rec = run.get("record") or run
    sys.stdout.write(f"run {run['id']}: {run['outcome']}: {rec.get('why', '')}\n")
    for st in rec.get("steps", []):
        detail = {k: v for k, v in st.items() if k not in ("step", "at")}
        sys.stdout.write(f"  {when(st['at'])}  {st['step']:<9} {detail}\n")


@policy_app.command("create")
def create_command(
    name: str = typer.Argument(..., help="Policy name.", show_default=False),
    spec: Path = typer.Option(..., "--spec", help="PolicySpec YAML.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Create a policy from YAML (deployment, model, trigger, retrain, gate, canary)."""
    from aifab.ops.policy.service import create_policy

    out = create_policy(name, spec)
    emit(out, True) if as_json else sys.stdout.write(f"created policy {name}\n")


@policy_app.command("list")
def list_command(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """List policies."""
    from aifab.ops.policy.service import list_policies

    emit(list_policies(), as_json, ["name", "deployment", "model", "monitor", "created_by"])


@policy_app.command("show")
def show_command(
    name: str = typer.Argument(..., help="Policy.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """A policy and its latest run."""
    from aifab.ops.policy.service import get_policy

    p = get_policy(name)
    if as_json:
        emit(p, True)
        return
    spec = p["spec"]
    sys.stdout.write(
        f"policy {name}: {spec['trigger']['monitor']} alerts -> retrain {spec['model']} "
        f"({spec['retrain']['recipe']}) -> gate -> canary {spec['canary']['weight']:g}% on "
        f"{spec['deployment']}\n"
    )
    if p["last_run"]:
        _print_record(p["last_run"])


@policy_app.command("dry-run")
def dry_run_command(
    name: str = typer.Argument(..., help="Policy.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show what the policy would do now; change nothing."""
    from aifab.ops.loop import dry_run

    out = dry_run(name)
    if as_json:
        emit(out, True)
        return
    for i, line in enumerate(out["plan"], 1):
        sys.stdout.write(f"{i}. {line}\n")


@policy_app.command("run")
def run_command(
    name: str = typer.Argument(..., help="Policy.", show_default=False),
    force: bool = typer.Option(False, "--force", help="Retrain even without a firing alert."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Run the loop once now (waits for the job, the gate and the canary window)."""
    from aifab.ops.loop import run_policy

    out = run_policy(name, force=force)
    if as_json:
        emit(out, True)
        return
    _print_record(out)
    if out["outcome"] == "skipped" and not force:
        # The trigger said no (no firing alert, cool-down): name the way past it.
        sys.stdout.write(f"hint: `aifab policy run {name} --force` retrains now anyway\n")


@policy_app.command("history")
def history_command(
    name: str = typer.Argument(..., help="Policy.", show_default=False),
    limit: int = typer.Option(10, "--limit", help="How many runs."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """A policy's runs, newest first, each with the record that explains it."""
    from aifab.ops.policy.service import policy_history

    runs = policy_history(name, limit)
    if as_json:
        emit(runs, True)
        return
    for r in runs:
        _print_record(r)


def register(app: typer.Typer) -> None:
    """Add the ``policy`` group to ``app``."""
    app.add_typer(policy_app, name="policy", no_args_is_help=True)
