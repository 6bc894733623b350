"""``aifab data`` commands for ingest."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the ingest commands to the ``aifab data`` group."""
