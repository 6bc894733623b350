"""How the CLI prints: rich tables for people, ``--json`` for scripts, one line for errors."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any

JSON_HELP = "Print machine-readable JSON instead of a table."


#: Columns that hold UNIX timestamps (seconds): shown as UTC dates, not as 1.79633e+09.
_TIME_SUFFIXES = ("_at", "_time", "_ts")
_TIME_COLUMNS = ("ts", "since", "until")


def _cell(value: Any, column: str = "") -> str:
    if value is None:
        return ""
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and (column.endswith(_TIME_SUFFIXES) or column in _TIME_COLUMNS)
        and value > 1e8
    ):
        return when(float(value))
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


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is one: "1 row", "3 rows" (not "1 rows")."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


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
    cells = [[_cell(r.get(c), str(c)) for c in cols] for r in rows]
    natural = [_longest([str(c)] + [row[i] for row in cells]) for i, c in enumerate(cols)]
    wide = os.environ.get("AIFAB_WIDE") == "1"
    console = Console(emoji=False, markup=False, width=_frame(natural) if wide else None)
    # Folded cells of a wide table break every word into fragments at 80 columns: a cell keeps
    # one line and ends in an ellipsis instead, columns that do not fit are counted, and
    # --wide shows everything.
    widths = natural if wide else _fit(natural, console.width)
    table = Table(title=Text(title) if title is not None else None, show_lines=False)
    for c, w in zip(cols, widths, strict=False):
        table.add_column(Text(str(c)), width=w, no_wrap=not wide, overflow="ellipsis")
    for row in cells:
        table.add_row(*(Text(value) for value in row[: len(widths)]))
    console.print(table)
    if len(widths) < len(cols):
        hidden = ", ".join(cols[len(widths) :])
        console.print(Text(f"({len(cols) - len(widths)} more columns: {hidden}; --wide shows all)"))


_MIN_CELL = 8


def _longest(values: Sequence[str]) -> int:
    return max((len(line) for v in values for line in (v.splitlines() or [""])), default=0)


def _frame(widths: Sequence[int]) -> int:
    """A table's width with borders and padding around cells of these widths."""
    return sum(widths) + 3 * len(widths) + 1


def _fit(natural: Sequence[int], width: int) -> list[int]:
    """Cell widths that fit ``width``.

    The leading columns that fit at their floor are kept; the room left is shared out smallest
    need first, so short columns (ids, dates) show whole and long text is what gets cut.
    """
    floors: list[int] = []
    for n in natural:
        if _frame(floors + [min(n, _MIN_CELL)]) > width and floors:
            break
        floors.append(min(n, _MIN_CELL))
    widths = list(floors)
    room = max(0, width - _frame(floors))
    needs = sorted(range(len(floors)), key=lambda i: natural[i] - floors[i])
    for k, i in enumerate(needs):
        share = room // (len(needs) - k)
        extra = min(natural[i] - floors[i], share)
        widths[i] += extra
        room -= extra
    return widths


def emit(
    data: Any, as_json: bool, columns: Sequence[str] | None = None, title: str | None = None
) -> None:
    """Print ``data`` as JSON, a table (list of dicts) or key/value pairs (dict)."""
    if as_json:
        print_json(data)
    elif isinstance(data, list):
        print_table(data, columns, title)
    elif isinstance(data, dict):
        pairs = [{"field": k, "value": _cell(v, str(k))} for k, v in data.items()]
        print_table(pairs, title=title)
    else:
        sys.stdout.write(f"{data}\n")


def error_line(message: str) -> None:
    """Print one error line to stderr."""
    sys.stderr.write(f"error: {message}\n")
