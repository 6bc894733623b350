"""``aifab data`` commands for features."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the features commands to the ``aifab data`` group."""
