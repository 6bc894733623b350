"""``aifab monitor`` and ``aifab alerts``: watch deployments, list and silence alerts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from aifab.cli.output import JSON_HELP, emit, when

monitor_app = typer.Typer(help="Monitors: drift, quality and objectives of a deployment.")
alerts_app = typer.Typer(help="Alerts raised by monitors: list, silence, history.")

_COLUMNS = ["name", "deployment", "window_s", "created_by", "created"]
_RESULT_COLUMNS = ["id", "at", "status", "rows", "drift_share", "accuracy", "p99_ms", "errors"]


def _fmt(v: Any) -> str:
    return "" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


def _result_row(r: dict[str, Any]) -> dict[str, Any]:
    v = r["values"]
    return {
        "id": r["id"],
        "at": when(r["ts"]),
        "status": r["status"],
        "rows": _fmt(v.get("rows")),
        "drift_share": _fmt(v.get("drift_share")),
        "accuracy": _fmt(v.get("accuracy")),
        "p99_ms": _fmt(v.get("latency_p99_ms")),
        "errors": _fmt(v.get("error_rate")),
    }


@monitor_app.command("create")
def create_command(
    name: str = typer.Argument(..., help="Monitor name.", show_default=False),
    spec: Path = typer.Option(..., "--spec", help="MonitorSpec YAML.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Create a monitor from a YAML spec (deployment, window_s, drift, quality, objectives)."""
    from aifab.ops import create_monitor

    out = create_monitor(name, spec)
    emit(out, True) if as_json else sys.stdout.write(f"created monitor {name}\n")


@monitor_app.command("list")
def list_command(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """List monitors."""
    from aifab.ops import list_monitors

    rows = list_monitors()
    if not as_json:
        rows = [
            {**r, "window_s": r["spec"]["window_s"], "created": when(r["created_at"])} for r in rows
        ]
    emit(rows, as_json, _COLUMNS)


def _print_result(result: dict[str, Any]) -> None:
    emit([_result_row(result)], False, _RESULT_COLUMNS)
    report = result.get("report") or {}
    for note in report.get("notes", []):
        sys.stdout.write(f"note: {note}\n")
    for col, info in (report.get("drift") or {}).get("columns", {}).items():
        tests = ", ".join(f"{t}={x['value']:.4g}" for t, x in info["tests"].items())
        flag = "DRIFT" if info["drift"] else "ok"
        sys.stdout.write(f"  {col:<24} {flag:<6} {tests}\n")
        words = info.get("words")
        if words:
            now, then = ", ".join(words["current"][:5]), ", ".join(words["reference"][:5])
            sys.stdout.write(f"  {'':<24} words now: {now or '-'}; before: {then or '-'}\n")
    for b in report.get("breaches", []):
        sys.stdout.write(f"breach: {b['rule']}: {b['message']}\n")


@monitor_app.command("run")
def run_command(
    name: str = typer.Argument(..., help="Monitor name.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Run a monitor now over its window; store the result and raise alerts."""
    from aifab.ops import run_monitor

    result = run_monitor(name)
    emit(result, True) if as_json else _print_result(result)


@monitor_app.command("show")
def show_command(
    name: str = typer.Argument(..., help="Monitor name.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """A monitor's spec and latest result."""
    from aifab.ops import get_monitor

    m = get_monitor(name)
    if as_json:
        emit(m, True)
        return
    sys.stdout.write(f"monitor {m['name']} on deployment {m['deployment']}\n")
    if m["last_result"] is None:
        sys.stdout.write("no runs yet\n")
    else:
        _print_result(m["last_result"])


@monitor_app.command("history")
def history_command(
    name: str = typer.Argument(..., help="Monitor name.", show_default=False),
    limit: int = typer.Option(20, "--limit", help="How many results."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """A monitor's results, newest first."""
    from aifab.ops import monitor_history

    rows = monitor_history(name, limit)
    emit(rows if as_json else [_result_row(r) for r in rows], as_json, _RESULT_COLUMNS)


_ALERT_COLUMNS = ["id", "state", "rule", "monitor", "severity", "count", "message", "last"]


@alerts_app.command("list")
def alerts_list_command(
    state: str = typer.Option(None, "--state", help="firing | resolved"),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Alerts, newest first."""
    from aifab.ops import list_alerts

    rows = list_alerts(state)
    if not as_json:
        rows = [
            {
                **r,
                "state": r["state"] + (" (silenced)" if r["silenced"] else ""),
                "last": when(r["last_at"]),
            }
            for r in rows
        ]
    emit(rows, as_json, _ALERT_COLUMNS)


def _duration(text: str) -> float:
    from aifab.core.errors import InvalidInputError

    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    t = text.strip().lower()
    try:
        return float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t)
    except ValueError:
        raise InvalidInputError(f"--for {text!r}: expected e.g. 30m, 2h, 1d") from None


@alerts_app.command("silence")
def silence_command(
    rule: str = typer.Option(None, "--rule", help="Mute this rule (data_drift, quality...)."),
    monitor: str = typer.Option(None, "--monitor", help="Mute this monitor's alerts."),
    duration: str = typer.Option("1h", "--for", help="How long: 30m, 2h, 1d."),
    reason: str = typer.Option("", "--reason", help="Why (kept in the history)."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Silence alerts of a rule and/or a monitor for a while."""
    from aifab.ops import silence_alerts

    out = silence_alerts(rule=rule, monitor=monitor, duration_s=_duration(duration), reason=reason)
    if as_json:
        emit(out, True)
        return
    sys.stdout.write(f"silence {out['id']} until {when(out['until'])}\n")


@alerts_app.command("history")
def alerts_history_command(
    alert_id: int = typer.Option(None, "--alert", help="Only this alert's events."),
    limit: int = typer.Option(50, "--limit", help="How many events."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Alert events: fired, repeated, silenced, resolved, delivered, delivery_failed."""
    from aifab.ops import alert_history

    rows = alert_history(alert_id, limit)
    if not as_json:
        rows = [{**r, "at": when(r["ts"]), "detail": r["detail"]} for r in rows]
    emit(rows, as_json, ["alert_id", "at", "event", "rule", "monitor", "detail"])


def register(app: typer.Typer) -> None:
    """Add the ``monitor`` and ``alerts`` groups to ``app``."""
    app.add_typer(monitor_app, name="monitor", no_args_is_help=True)
    app.add_typer(alerts_app, name="alerts", no_args_is_help=True)
