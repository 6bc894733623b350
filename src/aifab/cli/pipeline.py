"""``aifab run`` and ``aifab demo``: execute pipeline YAML files."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the pipeline commands to the root app."""
