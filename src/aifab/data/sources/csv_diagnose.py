"""Why a CSV file could not be read, and which ingest option reads it.

DuckDB's own messages stop at "Error when sniffing file" or list generic fixes; these helpers
look at the file to name the real cause (a stray quote, an over-long line, another encoding)
and the ``aifab data ingest`` option that fixes it.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from aifab.core.errors import InvalidInputError, first_line
from aifab.data import lake
from aifab.data.sources.options import IngestOptions
from aifab.data.sources.staged import refuse_share

#: Lines scanned for an unbalanced quote.
_SCAN_LINES = 20_000
_PREVIEW = 80
#: What each kind of rejected line means, and the option that usually reads such a file.
HINTS = {
    "TOO MANY COLUMNS": ("rows have more fields than the header", "--delimiter or --no-header"),
    "MISSING COLUMNS": ("rows have fewer fields than the header", "--delimiter"),
    "CAST": ("values do not fit the sniffed column types", "--sample-size -1"),
    "UNQUOTED VALUE": ("fields have unbalanced quotes", "--quote '' or --escape"),
    "INVALID ENCODING": ("the text is not UTF-8", "--encoding"),
    "LINE SIZE OVER MAXIMUM": ("lines are longer than the maximum", "--max-line-size"),
}


def unbalanced_quote_line(path: Path, quote: str = '"') -> int | None:
    """The first line (1-based) of the first lines with an odd number of quotes, if any."""
    with path.open("r", encoding="utf-8", errors="replace", newline="") as fh:
        for number, line in enumerate(fh, 1):
            if line.count(quote) % 2:
                return number
            if number >= _SCAN_LINES:
                return None
    return None


def _long_line(path: Path, limit: int) -> tuple[int, int]:
    """The first line (number, bytes) longer than ``limit``; DuckDB's own count skips some."""
    with path.open("rb") as fh:
        for number, line in enumerate(fh, 1):
            if len(line) > limit:
                return number, len(line)
    return 0, limit


def _dialect(con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> str:
    """The sniffed dialect in words, or an empty string when even sniffing fails."""
    try:
        delim, quote, header, cols = con.execute(
            "SELECT Delimiter, Quote, HasHeader, len(Columns) FROM sniff_csv("
            f"{lake.sql_string(str(path))}, sample_size={opts.sample_size}, null_padding=true)"
        ).fetchall()[0]
    except duckdb.Error:
        return ""
    head = "a header line" if header else "no header line"
    return f"delimiter {delim!r}, quote {quote!r}, {head}, {cols} columns"


def _first_line(path: Path) -> str:
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        line = fh.readline().rstrip("\r\n")
    return line if len(line) <= _PREVIEW else line[:_PREVIEW] + "..."


def diagnose(
    exc: duckdb.Error, source: str, path: Path, fmt: str, opts: IngestOptions
) -> InvalidInputError:
    """An error naming the cause of a DuckDB CSV failure and the option that fixes it."""
    text = str(exc)
    size = re.search(r"Maximum line size of (\d+) bytes exceeded", text)
    if size:
        line, length = _long_line(path, int(size.group(1)))
        return InvalidInputError(
            f"{source}: line {line} is {length} bytes, over the maximum line size of "
            f"{size.group(1)}; pass --max-line-size {length + 1} to read it"
        )
    if "Invalid unicode" in text:
        return InvalidInputError(
            f"{source}: the text is not UTF-8; pass --encoding with the file's encoding "
            "(e.g. latin-1, cp1252, utf-16)"
        )
    if "sniffing file" in text or "unterminated quote" in text:
        quote = opts.quote or '"'
        odd = unbalanced_quote_line(path, quote) if quote else None
        if odd is not None:
            return InvalidInputError(
                f"{source}: line {odd} has an unbalanced quote ({quote}); pass --quote '' to "
                "read quotes as text, or --escape if quotes inside fields are escaped"
            )
        return InvalidInputError(
            f"{source}: cannot detect the {fmt.upper()} dialect (first line: "
            f"{_first_line(path)!r}); pass --delimiter, --quote and --escape"
        )
    return InvalidInputError(f"{source}: cannot read as {fmt}: {first_line(exc)}")


def refuse_if_few_kept(
    con: duckdb.DuckDBPyConnection,
    source: str,
    path: Path,
    fmt: str,
    opts: IngestOptions,
    kept: int,
    rejected: int,
    table: str,
    header: bool = False,
) -> None:
    """Raise when under ``opts.min_kept_share`` of the rows were kept (nothing is committed).

    Raises:
        InvalidInputError: what the file looks like, what was wrong with its rows and which
            option would read it.
    """
    total = kept + rejected
    if total and kept and kept / total >= opts.min_kept_share:
        return
    if not rejected:
        why = "the file has no data rows"
        if header:
            why += " (its first line was read as the header; pass --no-header to read it as data)"
        refuse_share(source, kept, rejected, opts.min_kept_share, why)
    kind, message = con.execute(
        f"SELECT CAST(error_type AS VARCHAR), any_value(error_message) FROM {table} "
        "GROUP BY ALL ORDER BY count(*) DESC LIMIT 1"
    ).fetchall()[0]
    what, option = HINTS.get(str(kind), (str(kind).lower(), "--delimiter"))
    if opts.strict and kind in ("TOO MANY COLUMNS", "MISSING COLUMNS"):
        option = "no --strict (pads short rows, names extra fields)"
    looks = _dialect(con, path, opts) or "an unknown dialect"
    why = f"{what} ({message}); the file looks like {looks}, first line "
    refuse_share(
        source, kept, rejected, opts.min_kept_share, f"{why}{_first_line(path)!r}; try {option}"
    )
