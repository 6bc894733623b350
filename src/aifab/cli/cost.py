"""``aifab cost`` (the ledger: collect, report, prices) and ``aifab budget`` (team budgets)."""

from __future__ import annotations

import csv
import sys

import typer

from aifab.cli.output import JSON_HELP, emit, when

cost_app = typer.Typer(help="The cost ledger: what training and inference cost, by team.")
budget_app = typer.Typer(help="Team budgets: jobs and gateway calls stop when one is spent.")

_SUMS = ["cost", "cpu_hours", "gpu_hours", "memory_gb_hours", "requests", "tokens"]
_BUDGET_COLUMNS = ["team", "amount", "period", "alert_at", "spent", "share", "state"]


@cost_app.command("report")
def report_command(
    by: str = typer.Option("team", "--by", help="team | project | model | deployment | day"),
    since: str | None = typer.Option(None, "--since", help="Start: 24h, 7d, 2w or a date."),
    until: str | None = typer.Option(None, "--until", help="End, same forms (default: now)."),
    team: str | None = typer.Option(None, "--team", help="Only this team's spending."),
    fmt: str = typer.Option("table", "--format", help="table | csv | json"),
) -> None:
    """Spending grouped by one dimension (new usage is rolled into the ledger first)."""
    from aifab.core.errors import InvalidInputError
    from aifab.ops import cost_report

    if fmt not in ("table", "csv", "json"):
        raise InvalidInputError(f"format {fmt!r}: use table, csv or json")
    report = cost_report(by, since=since, until=until, team=team)
    if fmt == "json":
        emit(report, True)
    elif fmt == "csv":
        writer = csv.DictWriter(sys.stdout, [by, *_SUMS], lineterminator="\n")
        writer.writeheader()
        writer.writerows(report["rows"])
    else:
        title = f"cost by {by} ({report['currency']}), total {report['total']:.4f}"
        emit(report["rows"], False, [by, *_SUMS], title=title)


@cost_app.command("collect")
def collect_command(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Price new job attempts and gateway traffic into the ledger now."""
    from aifab.ops import collect

    emit(collect(), as_json)


@cost_app.command("prices")
def prices_command(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """The prices in force (defaults, AIFAB_PRICE_* variables, <workspace>/prices.yaml)."""
    from aifab.ops import load_prices

    emit(load_prices().model_dump(), as_json)


@budget_app.command("set")
def set_command(
    team: str = typer.Argument(..., help="The team (as given to keys and jobs)."),
    amount: float = typer.Option(..., "--amount", help="What it may spend per period."),
    period: str = typer.Option("month", "--period", help="day | week | month (UTC)."),
    alert_at: float = typer.Option(0.8, "--alert-at", help="Share of the amount that warns."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Create or replace a team's budget."""
    from aifab.ops import set_budget

    emit(set_budget(team, amount, period=period, alert_at=alert_at), as_json)


@budget_app.command("status")
def status_command(
    team: str | None = typer.Option(None, "--team", help="Only this team."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """What each team spent this period against its budget (ok, alert or over)."""
    from aifab.ops import budget_status

    rows = budget_status(team)
    if not as_json:
        rows = [{**r, "share": f"{r['share']:.1%}", "spent": round(r["spent"], 6)} for r in rows]
    emit(rows, as_json, _BUDGET_COLUMNS)


@budget_app.command("list")
def list_command(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Every budget."""
    from aifab.ops import list_budgets

    rows = list_budgets()
    if not as_json:
        rows = [{**r, "updated_at": when(r["updated_at"])} for r in rows]
    emit(rows, as_json, ["team", "amount", "period", "alert_at", "created_by", "updated_at"])


@budget_app.command("delete")
def delete_command(team: str = typer.Argument(..., help="The team.")) -> None:
    """Remove a team's budget."""
    from aifab.ops import delete_budget

    delete_budget(team)
    emit(f"budget of team {team} deleted", False)


def register(app: typer.Typer) -> None:
    """Add the ``cost`` and ``budget`` groups to ``app``."""
    app.add_typer(cost_app, name="cost", no_args_is_help=True)
    app.add_typer(budget_app, name="budget", no_args_is_help=True)
