"""``aifab runs``: list, show and compare tracked training runs (MLflow)."""

from __future__ import annotations

from typing import Any

import typer

from aifab.cli import fast_runs
from aifab.cli.output import JSON_HELP, emit, print_json, print_table, when

runs_app = typer.Typer(help="List, show and compare training runs.", no_args_is_help=True)

_LIST_COLUMNS = ["id", "experiment", "name", "status", "started", "duration_s", "metrics"]
#: Metrics shown per run in the ``runs list`` table (all of them with ``--json``).
_TABLE_METRICS = 4


def _metric_summary(metrics: dict[str, float]) -> str:
    shown = [f"{k}={v:.4g}" for k, v in sorted(metrics.items())[:_TABLE_METRICS]]
    more = len(metrics) - len(shown)
    return ", ".join(shown) + (f" (+{more})" if more > 0 else "")


@runs_app.command("list")
def list_command(
    experiment: str | None = typer.Option(None, "--experiment", "-e", help="Only this experiment."),
    limit: int = typer.Option(50, help="How many runs, newest first."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """List recent runs."""
    rows = fast_runs.list_runs(experiment=experiment, limit=limit)
    if rows is None:
        from aifab.track import list_runs

        rows = list_runs(experiment=experiment, limit=limit)
    if not as_json:
        rows = [
            {**r, "started": when(r["start_time"]), "metrics": _metric_summary(r["metrics"])}
            for r in rows
        ]
    emit(rows, as_json, _LIST_COLUMNS)


@runs_app.command("show")
def show_command(
    run_id: str = typer.Argument(..., help="Run id.", show_default=False),
    history: bool = typer.Option(False, "--history", help="Include every metric point."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show a run: params, final metrics, tags, dataset inputs and artifacts."""
    from aifab.track import get_run

    run = get_run(run_id, history=history)
    if as_json:
        print_json(run)
        return
    head = ("id", "experiment", "name", "status", "duration_s", "artifact_uri")
    summary = {k: run[k] for k in head} | {"started": when(run["start_time"])}
    emit(summary, False, title=f"run {run_id}")
    _section("params", [{"param": k, "value": v} for k, v in sorted(run["params"].items())])
    _section("metrics", [{"metric": k, "value": v} for k, v in sorted(run["metrics"].items())])
    _section("datasets", run["datasets"])
    _section("tags", [{"tag": k, "value": v} for k, v in sorted(run["tags"].items())])
    _section("artifacts", run["artifacts"])
    for key, points in run.get("metric_history", {}).items():
        _section(f"history: {key}", points)


def _section(title: str, rows: list[dict[str, Any]]) -> None:
    if rows:
        print_table(rows, title=title)


@runs_app.command("compare")
def compare_command(
    run_ids: list[str] = typer.Argument(..., help="Two or more run ids.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Compare runs: the params that differ and every final metric, side by side."""
    from aifab.track import compare_runs

    result = compare_runs(run_ids)
    if as_json:
        print_json(result)
        return
    heads = [f"{r['name'] or ''} ({r['id'][:8]})" for r in result["runs"]]
    params = [{"param": k, **dict(zip(heads, v, strict=True))} for k, v in result["params"].items()]
    metrics = [
        {"metric": k, **dict(zip(heads, v, strict=True))} for k, v in result["metrics"].items()
    ]
    print_table(
        params, ["param", *heads], title=f"params that differ ({result['same_params']} equal)"
    )
    print_table(metrics, ["metric", *heads], title="metrics")


def register(app: typer.Typer) -> None:
    """Add the ``runs`` group to ``app``."""
    app.add_typer(runs_app, name="runs")
