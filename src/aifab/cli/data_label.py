"""``aifab data`` commands for labels: labeling functions, imports and the human queue."""

from __future__ import annotations

from pathlib import Path

import typer

from aifab.cli.output import JSON_HELP, emit, when

_OUTPUT_HELP = "Dataset name for the result (default: a new version of NAME)."


def _label(
    name: str = typer.Argument(..., help="Dataset to label (NAME or NAME@VERSION)."),
    spec: Path = typer.Option(..., "-f", "--file", help="Labeling spec YAML (functions...)."),
    output: str | None = typer.Option(None, "--output", "-o", help=_OUTPUT_HELP),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Label a dataset with labeling functions (human labels override their votes)."""
    from aifab.data.label import label

    result = label(name, spec, output=output)
    stats = result.version.transform.get("stats", {})
    summary = {
        "version": result.version.ref,
        "created": result.created,
        "rows": stats.get("rows"),
        "covered_by_functions": stats.get("covered"),
        "coverage": stats.get("coverage"),
        "human_labels": stats.get("human"),
    }
    functions = [{"function": k, **v} for k, v in stats.get("functions", {}).items()]
    if as_json:
        emit({**summary, "functions": functions}, True)
        return
    emit(summary, False)
    emit(functions, False, ["function", "fires", "coverage", "conflicts", "conflict_rate"])


def _label_import(
    name: str = typer.Argument(..., help="Dataset to label (NAME or NAME@VERSION)."),
    file: Path = typer.Argument(..., help="CSV (with header) or JSONL file of labels."),
    key: str = typer.Option(..., "--key", help="Key column, in both the dataset and the file."),
    label_column: str = typer.Option("label", "--label-column", help="The file's label column."),
    output: str | None = typer.Option(None, "--output", "-o", help=_OUTPUT_HELP),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Join labels from a file onto a dataset by key (unknown keys are quarantined)."""
    from aifab.data.label import import_labels

    result = import_labels(name, file, key=key, label_column=label_column, output=output)
    emit(
        {
            "version": result.version.ref,
            "created": result.created,
            "imported": result.imported,
            "quarantined": result.quarantined or {},
        },
        as_json,
    )


def _label_queue(
    name: str = typer.Argument(..., help="Dataset whose latest version to draw items from."),
    n: int = typer.Option(10, "-n", help="How many items."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show the next items that need a human label (least confident first)."""
    from aifab.data.label import label_queue_next

    items = label_queue_next(name, n)
    emit(
        items,
        as_json,
        ["key", "text", "label", "label_confidence", "label_source"]
        if items and "label" in items[0]
        else None,
    )


def _label_submit(
    name: str = typer.Argument(..., help="Dataset name."),
    item_key: str = typer.Argument(..., help="The item's key (as shown by label-queue)."),
    label: str = typer.Argument(..., help="The label to give it."),
) -> None:
    """Give an item a human label (used by the next 'aifab data label' run)."""
    from aifab.data.label import submit_label

    submit_label(name, item_key, label)
    typer.echo(f"labeled {item_key!r} in {name} as {label!r}")


def _label_history(
    name: str = typer.Argument(..., help="Dataset name."),
    limit: int = typer.Option(100, "--limit", help="At most this many entries."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show who labeled what, and when (newest first)."""
    from aifab.data.label import label_history

    rows = label_history(name, limit)
    if not as_json:
        rows = [{**r, "created_at": when(r["created_at"])} for r in rows]
    emit(rows, as_json, ["item_key", "label", "labeler", "created_at"])


def register(app: typer.Typer) -> None:
    """Add the label commands to the ``aifab data`` group."""
    app.command("label")(_label)
    app.command("label-import")(_label_import)
    app.command("label-queue")(_label_queue)
    app.command("label-submit")(_label_submit)
    app.command("label-history")(_label_history)
