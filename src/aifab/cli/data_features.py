"""``aifab data`` commands for features and train/valid/test splits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from aifab.cli.output import JSON_HELP, emit, when


def _features(
    name: str = typer.Argument(..., help="Input dataset (NAME or NAME@VERSION)."),
    spec: Path = typer.Option(..., "-f", "--file", help="Feature spec YAML."),
    output: str | None = typer.Option(
        None, "--output", "-o", help="Features dataset / feature set name (default NAME.features)."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Fit features on the training rows and build the features dataset."""
    from aifab.data.features import fit_features

    result = fit_features(name, spec, output=output)
    ft = result.transform
    emit(
        {
            "version": result.version.ref,
            "feature_set": ft.name,
            "digest": ft.digest,
            "artifact": str(result.artifact_path),
            "fitted_on": ft.fitted_on["ref"],
            "train_rows": ft.train_rows,
            "fitted_on_all_rows": ft.fitted_on_all_rows,
            "columns": ft.output_columns,
        },
        as_json,
    )


def _feature_sets(
    limit: int = typer.Option(100, "--limit", help="At most this many feature sets."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """List fitted feature transforms (newest first)."""
    from aifab.data.features import list_feature_sets

    rows = list_feature_sets(limit)
    if not as_json:
        rows = [
            {**r, "digest": r["digest"][:12], "created_at": when(r["created_at"])} for r in rows
        ]
    emit(rows, as_json, ["name", "digest", "fitted_on", "features", "created_at", "path"])


def _split_spec(
    file: Path | None,
    method: str | None,
    by: str | None,
    seed: int | None,
    fractions: dict[str, float | None],
) -> dict[str, Any]:
    """The spec from ``-f`` (if any) with the options given on the command line on top."""
    from aifab.core.config import load_yaml
    from aifab.core.errors import InvalidInputError

    base = load_yaml(file) if file else {}
    if base is None:
        base = {}
    if not isinstance(base, dict):
        raise InvalidInputError(f"{file}: a split spec must be a mapping")
    spec = dict(base)
    for key, value in (("method", method), ("by", by), ("seed", seed)):
        if value is not None:
            spec[key] = value
    given = {k: v for k, v in fractions.items() if v is not None}
    if given:
        spec["fractions"] = {**(spec.get("fractions") or {}), **given}
    return spec


def _split(
    name: str = typer.Argument(..., help="Dataset to split (NAME or NAME@VERSION)."),
    method: str | None = typer.Option(None, "--method", help="random, stratified or time."),
    by: str | None = typer.Option(None, "--by", help="Class (stratified) or time column."),
    seed: int | None = typer.Option(None, "--seed", help="Seed of the random order."),
    train: float | None = typer.Option(None, "--train", help="Share of training rows (0.8)."),
    valid: float | None = typer.Option(None, "--valid", help="Share of validation rows (0.1)."),
    test: float | None = typer.Option(None, "--test", help="Share of test rows (0.1)."),
    file: Path | None = typer.Option(None, "-f", "--file", help="Split spec YAML."),
    output: str | None = typer.Option(
        None, "--output", "-o", help="Dataset name for the result (default: NAME)."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Add a train/valid/test 'split' column (options override the -f spec)."""
    from aifab.data.splits import split

    spec = _split_spec(file, method, by, seed, {"train": train, "valid": valid, "test": test})
    result = split(name, spec, output=output)
    counts = result.version.transform.get("counts", {})
    emit(
        {
            "version": result.version.ref,
            "created": result.created,
            **{k: counts.get(k) for k in ("train", "valid", "test")},
        },
        as_json,
    )


def register(app: typer.Typer) -> None:
    """Add the features and split commands to the ``aifab data`` group."""
    app.command("features")(_features)
    app.command("feature-sets")(_feature_sets)
    app.command("split")(_split)
