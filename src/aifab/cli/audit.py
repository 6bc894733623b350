"""``aifab audit``: read, verify and anchor the keyed, hash-chained audit log."""

from __future__ import annotations

from pathlib import Path

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
    from aifab.ops.cost.ledger import parse_since

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
def verify(
    anchors: Path | None = typer.Option(
        None, "--anchors", help="Also check against this exported anchor file."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Check the keyed hash chain and its anchors; exit 3 if events were edited or deleted."""
    from aifab.core import verify_audit
    from aifab.core.errors import IntegrityError, NotFoundError

    if anchors is not None and not anchors.is_file():
        raise NotFoundError(f"anchor file {anchors} not found")
    report = verify_audit(anchors)
    if as_json:
        emit({"ok": report.ok, "events": report.events, "problems": report.problems}, True)
    if not report.ok:
        raise IntegrityError("audit chain broken: " + "; ".join(report.problems))
    if not as_json:
        emit(f"audit chain intact: {report.events} events", False)


@app.command("anchor")
def anchor(
    export: Path | None = typer.Option(
        None, "--export", help="Also append the anchor to this file (keep it off this machine)."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Append the chain's head to the anchor file, so deleting events before it is detected."""
    from aifab.core.audit import write_anchor

    a = write_anchor(export)
    if as_json:
        emit(a, True)
    else:
        where = f" and {export}" if export else ""
        emit(f"anchored {a['count']} events at {a['hash'][:16]} in the anchor file{where}", False)
