"""``aifab models zoo``: the model builders and their config fields."""

from __future__ import annotations

import typer

from aifab.cli.output import JSON_HELP, emit


def _zoo(
    name: str | None = typer.Argument(None, help="Show the config fields of this model."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """List the model zoo, or one model's config fields with types and defaults."""
    from aifab.core.errors import NotFoundError
    from aifab.models.zoo import list_zoo

    zoo = list_zoo()
    if name is None:
        rows = (
            zoo
            if as_json
            else [{**m, "fields": ", ".join(f["name"] for f in m["fields"])} for m in zoo]
        )
        emit(rows, as_json, ["name", "task", "description", "fields"])
        return
    match = [m for m in zoo if m["name"] == name]
    if not match:
        known = ", ".join(m["name"] for m in zoo)
        raise NotFoundError(f"unknown model {name!r} (known: {known})")
    if as_json:
        emit(match[0], True)
        return
    rows = [
        {**f, "default": "(required)" if f["required"] else f["default"]}
        for f in match[0]["fields"]
    ]
    title = f"{name}: {match[0]['description']}"
    emit(rows, False, ["name", "type", "default", "description"], title=title)


def register_zoo(models_app: typer.Typer) -> None:
    """Add the ``zoo`` command to the ``aifab models`` group."""
    models_app.command("zoo")(_zoo)
