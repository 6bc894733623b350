"""``aifab data clean | validate | quarantine``: data quality from the command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from aifab.cli.output import JSON_HELP, emit, print_json, when

_SPEC_FILE = typer.Option(..., "--file", "-f", help="The YAML spec.", show_default=False)
_OUTPUT = typer.Option(
    None, "--output", "-o", help="Dataset to write to (default: a new version of the input)."
)


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def clean_command(
    name: str = typer.Argument(..., help="Dataset to clean: NAME or NAME@VERSION."),
    file: Path = _SPEC_FILE,
    output: str | None = _OUTPUT,
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Apply the cleaning steps of a YAML file; commit the result as a new version."""
    from aifab.data.clean import clean

    result = clean(name, file, output=output)
    v = result.version
    steps = v.transform.get("steps", [])
    if as_json:
        print_json({"version": v.to_dict(), "created": result.created, "steps": steps})
        return
    rows = [
        {
            "step": s["step"],
            "op": s["op"],
            "details": {k: x for k, x in s.items() if k not in ("step", "op")} or "",
        }
        for s in steps
    ]
    emit(rows, False, ["step", "op", "details"])
    state = "created" if result.created else "unchanged (same content as existing version)"
    emit(f"{v.ref}: {v.num_rows} rows, {state}; parent {', '.join(v.parents)}", False)


def _verdict(report: Any) -> str:
    """The one line that says whether validation passed and what happened to the rows."""
    if not report.passed:
        return f"FAILED: {'; '.join(report.reasons)}; nothing committed"
    version = report.version.ref if report.version else "none (report only)"
    state = "PASSED with warnings" if report.warned else "PASSED"
    return (
        f"{state}: {report.failed_rows} of {report.rows} rows failed error-level rules "
        f"({report.failure_share:.1%}, allowed {report.max_failure_share:.1%}), "
        f"{report.warned_rows} with warnings, {report.quarantined} quarantined; "
        f"passing rows: {version}"
    )


def validate_command(
    name: str = typer.Argument(..., help="Dataset to check: NAME or NAME@VERSION."),
    file: Path = _SPEC_FILE,
    output: str | None = _OUTPUT,
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Check a dataset against the expectations of a YAML file; exit 1 if it fails.

    The run fails when an error-level expectation fails beyond max_failure_share (default 0:
    any failing row); warn-level expectations only report.
    """
    from aifab.data.validate import validate

    report = validate(name, file, output=output)
    if as_json:
        print_json(report.to_dict())
    else:
        rows = [
            {
                "rule": r.name,
                "level": f"{r.level}, {r.severity}",
                "failed": r.failed,
                "status": "ok" if r.passed else ("FAILED" if r.severity == "error" else "warn"),
                "detail": r.detail,
            }
            for r in report.rules
        ]
        emit(rows, False, ["rule", "level", "failed", "status", "detail"])
        emit(_verdict(report), False)
    if not report.passed:
        raise typer.Exit(1)


def quarantine_command(
    name: str = typer.Argument(..., help="Dataset name."),
    stage: str | None = typer.Option(None, help="Only this stage (ingest, clean, validate)."),
    limit: int = typer.Option(50, min=1, help="How many rows, newest first."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """List quarantined rows of a dataset with the rule they broke and why."""
    from aifab.data.quarantine import list_quarantine

    rows = list_quarantine(name, stage=stage, limit=limit)
    if as_json:
        emit(rows, True)
        return
    sys.stdout.write("".join(_quarantine_block(r) for r in rows) or "nothing quarantined\n")


def _quarantine_block(row: dict) -> str:
    """One quarantined row as lines that fit the terminal: the reason first, then the record.

    A table squeezed into 80 columns cut the reason to a few characters; wrapped lines keep
    every word of it.
    """
    import shutil
    import textwrap

    width = max(shutil.get_terminal_size((100, 24)).columns, 40)
    line = f" line {row['line']}" if row.get("line") is not None else ""
    head = f"#{row['id']} {row['stage']} {row['rule']}{line} ({when(row['created_at'])})"
    record = _short(json.dumps(row["record"], default=str), 400)
    out = [head]
    for label, text in (("reason", str(row["reason"])), ("record", record)):
        out += textwrap.wrap(text, width, initial_indent=f"  {label}: ", subsequent_indent="    ")
    return "\n".join(out) + "\n"


def register(app: typer.Typer) -> None:
    """Add the quality commands to the ``aifab data`` group."""
    app.command("clean")(clean_command)
    app.command("validate")(validate_command)
    app.command("quarantine")(quarantine_command)
