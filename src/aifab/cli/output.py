"""How the CLI prints: rich tables for people, ``--json`` for scripts, one line for errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

JSON_HELP = "Print machine-readable JSON instead of a table."


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)


def when(ts: float | None) -> str:
    """Format a UNIX timestamp for tables."""
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _json_default(value: Any) -> Any:
    """JSON for values DuckDB/Arrow hand back: decimals as numbers, dates as ISO strings."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def print_json(data: Any) -> None:
    """Write ``data`` as JSON to stdout."""
    sys.stdout.write(json.dumps(data, indent=2, default=_json_default) + "\n")


def print_table(
    rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None, title: str | None = None
) -> None:
    """Print dict rows as a rich table (columns default to the first row's keys).

    Every header, cell and the title is a plain :class:`rich.text.Text`: values come from user
    data, and as markup a cell such as ``[/i]`` would raise and ``[b]`` would vanish.
    """
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    cols = list(columns or (rows[0].keys() if rows else []))
    table = Table(title=Text(title) if title is not None else None, show_lines=False)
    for c in cols:
        table.add_column(Text(str(c)), overflow="fold")
    for r in rows:
        table.add_row(*(Text(_cell(r.get(c))) for c in cols))
    Console(emoji=False, markup=False).print(table)


def emit(
    data: Any, as_json: bool, columns: Sequence[str] | None = None, title: str | None = None
) -> None:
    """Print ``data`` as JSON, a table (list of dicts) or key/value pairs (dict)."""
    if as_json:
        print_json(data)
    elif isinstance(data, list):
        print_table(data, columns, title)
    elif isinstance(data, dict):
        print_table([{"field": k, "value": v} for k, v in data.items()], title=title)
    else:
        sys.stdout.write(f"{data}\n")


def error_line(message: str) -> None:
    """Print one error line to stderr."""
    sys.stderr.write(f"error: {message}\n")
