"""``aifab models card | fairness`` and ``aifab explain``: governance of registered models."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from aifab.cli.output import JSON_HELP, emit

_SENSITIVE_HELP = "A dataset column to group by (repeat for intersectional groups)."


def card_command(
    ref: str = typer.Argument(..., help="NAME@VERSION or NAME@ALIAS."),
    owner_file: Path | None = typer.Option(
        None, "--owner-file", help="YAML: intended_use, limitations, owners, sensitive."
    ),
    intended_use: str | None = typer.Option(None, "--intended-use", help="What it is for."),
    limitations: str | None = typer.Option(None, "--limitations", help="Where not to trust it."),
    sensitive: list[str] | None = typer.Option(None, "--sensitive", help=_SENSITIVE_HELP),
    html: bool = typer.Option(False, "--html", help="Print the HTML card instead of Markdown."),
    no_explain: bool = typer.Option(False, "--no-explain", help="Skip the global explanation."),
    no_attach: bool = typer.Option(False, "--no-attach", help="Do not attach it to the version."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Build a model's card from its lineage, attach it to the version and print it."""
    from aifab.ops import build_card

    result = build_card(
        ref,
        owner_file,
        intended_use=intended_use,
        limitations=limitations,
        sensitive=sensitive or None,
        explain=not no_explain,
        attach=not no_attach,
    )
    if as_json:
        emit({k: v for k, v in result.items() if k != "card"}, True)
        return
    sys.stdout.write((Path(result["path"]) / ("card.html" if html else "card.md")).read_text())


def fairness_command(
    ref: str = typer.Argument(..., help="NAME@VERSION or NAME@ALIAS."),
    sensitive: list[str] = typer.Option(..., "--sensitive", help=_SENSITIVE_HELP),
    positive: str | None = typer.Option(None, "--positive", help="The 'selected' class."),
    min_group_rows: int = typer.Option(5, "--min-group-rows", help="Smaller groups: shown only."),
    dataset: str | None = typer.Option(
        None, "--dataset", help="Evaluate on this labelled NAME@VERSION, not the test split."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Selection rate, TPR/FPR and accuracy by group on the test split, and the differences."""
    from aifab.ops import fairness_report

    report = fairness_report(
        ref, sensitive, positive=positive, min_group_rows=min_group_rows, dataset=dataset
    )
    if as_json:
        emit(report, True)
        return
    columns = ["group", "count", "accuracy", "selection_rate", "true_positive_rate"]
    emit(report["by_group"], False, [*columns, "false_positive_rate"], title=report["model"])
    for name in ("demographic_parity_difference", "equalized_odds_difference"):
        value = report[name]
        shown = "n/a (fewer than two groups)" if value is None else f"{value:.4f}"
        sys.stdout.write(f"{name}: {shown}\n")
    sys.stdout.write(f"positive class: {report['positive']}; excluded: {report['excluded']}\n")
    for warning in report["warnings"]:
        sys.stdout.write(f"warning: {warning}\n")


def _read_records(path: Path) -> Any:
    from aifab.core.errors import InvalidInputError

    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise InvalidInputError(f"{path}: not UTF-8 text") from None
    try:
        data = json.loads(text)
    except ValueError:
        try:  # JSON Lines: one record per line
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as exc:
            raise InvalidInputError(f"{path}: neither JSON nor JSON Lines ({exc})") from None
    return data.get("records") if isinstance(data, dict) else data


def explain_command(
    target: str = typer.Argument(..., help="A deployment name, or a model as NAME@VERSION."),
    records: Path = typer.Option(..., "--records", help="JSON list, {records: [...]} or JSONL."),
    top: int | None = typer.Option(None, "--top", help="Largest contributions per record."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Which raw features pushed each record's prediction, and by how much (Shapley values)."""
    from aifab.ops import explain_records

    ref = target
    if "@" not in target:
        from aifab.inference.deployments import get_deployment

        ref = get_deployment(target)["model"]
    result = explain_records(ref, _read_records(records), top=top)
    if as_json:
        emit(result, True)
        return
    for i, e in enumerate(result["explanations"]):
        title = (
            f"record {i}: {e['label']} (p={e['value']:.3f}, background {e['base']:.3f}) "
            f"- {result['model']}"
        )
        emit(e["contributions"], False, ["feature", "value", "contribution"], title=title)


def register_governance(models_app: typer.Typer, app: typer.Typer) -> None:
    """Add ``models card``, ``models fairness`` and the top-level ``explain``."""
    models_app.command("card")(card_command)
    models_app.command("fairness")(fairness_command)
    app.command("explain")(explain_command)
