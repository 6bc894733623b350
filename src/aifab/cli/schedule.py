"""``aifab schedule``: recurring pipelines, monitors and jobs on cron expressions."""

from __future__ import annotations

import sys
from typing import Any

import typer

from aifab.cli.output import JSON_HELP, emit, when

schedule_app = typer.Typer(help="Schedules: pipelines, monitors and jobs on a cron expression.")

_COLUMNS = ["name", "cron", "kind", "target", "state", "next"]


def _row(s: dict[str, Any]) -> dict[str, Any]:
    state = "paused" if s["paused"] else "running" if s["running"] else "active"
    return {**s, "state": state, "next": when(s["next_at"])}


@schedule_app.command("create")
def create_command(
    name: str = typer.Argument(..., help="Schedule name.", show_default=False),
    cron: str = typer.Option(..., "--cron", help="e.g. '0 * * * *' (UTC).", show_default=False),
    pipeline: str = typer.Option(None, "--pipeline", help="A pipeline YAML to run."),
    monitor: str = typer.Option(None, "--monitor", help="A monitor to run."),
    job: str = typer.Option(None, "--job", help="A JobSpec YAML to submit."),
    policy: str = typer.Option(None, "--policy", help="A retrain policy to evaluate."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Create a schedule; the worker of 'aifab serve' or 'aifab worker' runs it."""
    from aifab.core.errors import InvalidInputError
    from aifab.ops.schedules import create_schedule

    targets = {"pipeline": pipeline, "monitor": monitor, "job": job, "policy": policy}
    given = {k: v for k, v in targets.items() if v}
    if len(given) != 1:
        raise InvalidInputError("give exactly one of --pipeline, --monitor, --job, --policy")
    ((kind, target),) = given.items()
    out = create_schedule(name, cron, kind, target)
    emit(out, True) if as_json else emit([_row(out)], False, _COLUMNS)


@schedule_app.command("list")
def list_command(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """List schedules."""
    from aifab.ops.schedules import list_schedules

    rows = list_schedules()
    emit(rows if as_json else [_row(r) for r in rows], as_json, _COLUMNS)


@schedule_app.command("pause")
def pause_command(name: str = typer.Argument(..., help="Schedule.", show_default=False)) -> None:
    """Pause a schedule."""
    from aifab.ops.schedules import set_paused

    set_paused(name, True)
    sys.stdout.write(f"paused {name}\n")


@schedule_app.command("resume")
def resume_command(name: str = typer.Argument(..., help="Schedule.", show_default=False)) -> None:
    """Resume a schedule (from its next cron time)."""
    from aifab.ops.schedules import set_paused

    s = set_paused(name, False)
    sys.stdout.write(f"resumed {name}; next run {when(s['next_at'])}\n")


@schedule_app.command("delete")
def delete_command(name: str = typer.Argument(..., help="Schedule.", show_default=False)) -> None:
    """Delete a schedule (its runs stay)."""
    from aifab.ops.schedules import delete_schedule

    delete_schedule(name)
    sys.stdout.write(f"deleted {name}\n")


@schedule_app.command("runs")
def runs_command(
    name: str = typer.Argument(..., help="Schedule.", show_default=False),
    limit: int = typer.Option(20, "--limit", help="How many runs."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """A schedule's runs, newest first."""
    from aifab.ops.schedules import schedule_runs

    rows = schedule_runs(name, limit)
    if not as_json:
        rows = [{**r, "due": when(r["due_at"]), "started": when(r["started_at"])} for r in rows]
    emit(rows, as_json, ["id", "due", "started", "status", "detail"])


@schedule_app.command("tick")
def tick_command(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Run every due schedule now, in this process (what a worker does each second)."""
    from aifab.ops.schedules import run_due

    out = run_due("cli")
    emit(out, True) if as_json else sys.stdout.write(f"ran {len(out)} schedule(s)\n")


def register(app: typer.Typer) -> None:
    """Add the ``schedule`` group to ``app``."""
    app.add_typer(schedule_app, name="schedule", no_args_is_help=True)
