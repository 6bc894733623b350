"""``aifab data`` commands for label."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the label commands to the ``aifab data`` group."""
