"""``aifab init``: create the workspace and migrate the metadata DB."""

from __future__ import annotations

import typer

from aifab.cli.output import JSON_HELP, emit


def register(app: typer.Typer) -> None:
    """Add the workspace commands to the root app."""

    @app.command("init")
    def init(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
        """Create the workspace (AIFAB_HOME) and migrate the metadata DB to the newest schema."""
        from aifab.core import init_workspace

        emit(init_workspace(), as_json)
