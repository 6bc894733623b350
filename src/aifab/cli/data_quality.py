"""``aifab data`` commands for quality."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the quality commands to the ``aifab data`` group."""
