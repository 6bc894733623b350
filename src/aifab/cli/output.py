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
    # --wide shows everything. Ids and names are never cut: a cut id cannot be pasted into
    # `show` or `cancel`.
    widths = natural if wide else _fit(natural, console.width, _whole(cols), _first(cols))
    shown = [i for i, w in enumerate(widths) if w is not None]
    table = Table(title=Text(title) if title is not None else None, show_lines=False)
    for i in shown:
        table.add_column(Text(str(cols[i])), width=widths[i], no_wrap=not wide, overflow="ellipsis")
    for row in cells:
        table.add_row(*(Text(row[i]) for i in shown))
    console.print(table)
    if len(shown) < len(cols):
        hidden = ", ".join(str(c) for i, c in enumerate(cols) if widths[i] is None)
        console.print(Text(f"({len(cols) - len(shown)} more columns: {hidden}; --wide shows all)"))


_MIN_CELL = 8
#: Columns shown whole whatever the width: what a person copies into the next command.
_WHOLE_NAMES = frozenset(
    {"id", "name", "ref", "key", "version", "latest", "dataset", "model", "job", "deployment"}
)


def _whole(cols: Sequence[Any]) -> set[int]:
    """Indexes of the columns never cut: the first, ids and names."""
    keep = {0} if cols else set()
    for i, c in enumerate(map(str, cols)):
        if c in _WHOLE_NAMES or c.endswith(("_id", "_name", "_ref")):
            keep.add(i)
    return keep


def _first(cols: Sequence[Any]) -> set[int]:
    """Indexes of the columns kept before other cut-able ones: a row's state or status."""
    return {i for i, c in enumerate(map(str, cols)) if c in ("state", "status")}


def _longest(values: Sequence[str]) -> int:
    return max((len(line) for v in values for line in (v.splitlines() or [""])), default=0)


def _frame(widths: Sequence[int]) -> int:
    """A table's width with borders and padding around cells of these widths."""
    return sum(widths) + 3 * len(widths) + 1


def _fit(
    natural: Sequence[int],
    width: int,
    whole: set[int] | None = None,
    first: set[int] | None = None,
) -> list[int | None]:
    """Cell widths that fit ``width``; None for a column left out.

    Columns in ``whole`` (ids, names) keep their full width, or are left out when they cannot
    (the first is always shown). The other columns that fit at their floor are kept, those in
    ``first`` (state, status) before the rest, all shown in their own order; the room left is
    shared out smallest need first, so short columns (dates, counts) show whole and long text
    is what gets cut.
    """
    whole = whole or set()
    widths: list[int | None] = [None] * len(natural)
    for i in sorted(whole):  # whole or not at all: a cut id is worse than a hidden one
        taken = [w for w in widths if w is not None]
        if not taken:
            widths[i] = max(1, min(natural[i], width - _frame([0])))
        elif _frame([*taken, natural[i]]) <= width:
            widths[i] = natural[i]
    # A state or status is what a person looks for next to an id: it gets room first.
    order = sorted(range(len(natural)), key=lambda i: (i not in (first or set()), i))
    for i in order:
        n = natural[i]
        if i in whole:
            continue
        taken = [w for w in widths if w is not None]
        if _frame([*taken, min(n, _MIN_CELL)]) <= width or not taken:
            widths[i] = min(n, _MIN_CELL)
    taken = [w for w in widths if w is not None]
    room = max(0, width - _frame(taken))
    flexible = [i for i, w in enumerate(widths) if w is not None and i not in whole]
    needs = sorted(flexible, key=lambda i: natural[i] - (widths[i] or 0))
    for k, i in enumerate(needs):
        share = room // (len(needs) - k)
        extra = min(natural[i] - (widths[i] or 0), share)
        widths[i] = (widths[i] or 0) + extra
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
