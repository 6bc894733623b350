"""``aifab audit``: read and verify the hash-chained audit log."""

from __future__ import annotations

import typer

from aifab.cli.output import JSON_HELP, emit, when

app = typer.Typer(help="Read and verify the audit log.", no_args_is_help=True)


@app.command("list")
def list_(
    limit: int = typer.Option(50, help="How many events, newest first."),
    action: str | None = typer.Option(None, help="Only actions starting with this."),
    obj: str | None = typer.Option(
        None, "--object", help="Only objects starting with this, e.g. model:churn or job:."
    ),
    actor: str | None = typer.Option(None, "--actor", help="Only this actor, e.g. user:alice."),
    since: str | None = typer.Option(None, "--since", help="Start: 24h, 7d, 2w or a date."),
    until: str | None = typer.Option(None, "--until", help="End, same forms."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show recent audit events (who did what to which object, when)."""
    from aifab.core import audit_events
    from aifab.ops.cost import parse_since

    rows = audit_events(
        limit=limit,
        action=action,
        obj=obj,
        actor=actor,
        since=parse_since(since),
        until=parse_since(until),
    )
    if not as_json:
        rows = [{**r, "ts": when(r["ts"])} for r in rows]
    emit(rows, as_json, ["id", "ts", "actor", "action", "object"])


@app.command("verify")
def verify(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Check the hash chain; exit 3 if any event was edited, inserted or deleted."""
    from aifab.core import verify_audit
    from aifab.core.errors import IntegrityError

    report = verify_audit()
    if as_json:
        emit({"ok": report.ok, "events": report.events, "problems": report.problems}, True)
    if not report.ok:
        raise IntegrityError("audit chain broken: " + "; ".join(report.problems))
    if not as_json:
        emit(f"audit chain intact: {report.events} events", False)
