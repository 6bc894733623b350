"""Readings of a CSV file that a person could take two ways, settled and said out loud.

DuckDB's sniffer picks one reading silently: ``1/2/85`` as day first, ``Yes``/``No`` as
BOOLEAN, a first line of text as column names. These checks look at every value (one
aggregate query over the file read as text) and at the first lines, pick the reading a
person would expect (month first when every date reads both ways, as pandas and US
spreadsheets do; names from a ``#`` comment line that has one name per column), keep the
text where ``--strict`` asks for it, and return one note per choice naming the option that
changes it. The user's options always win.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field

import duckdb

from aifab.data import lake
from aifab.data.sources.options import IngestOptions

_TRUE_FALSE = ("true", "false")


@dataclass(frozen=True)
class Sniffed:
    """What the sniffer decided: column types, header, dialect and date formats."""

    types: list[tuple[str, str]]
    header: bool
    delim: str
    comment: str
    dates: str
    stamps: str
    skip: int = 0


@dataclass
class Settled:
    """Options that read the file the settled way (``None``: as sniffed) and the notes."""

    options: IngestOptions | None = None
    notes: list[str] = field(default_factory=list)
    #: Columns to keep as text (``--strict`` on values that read two ways).
    text: list[str] = field(default_factory=list)


def day_first(fmt: str) -> bool | None:
    """Whether a strptime format puts the day before the month (``None``: not ambiguous)."""
    if not fmt or fmt.startswith("%Y") or "%d" not in fmt or "%m" not in fmt:
        return None
    return fmt.index("%d") < fmt.index("%m")


def swapped(fmt: str) -> str:
    """The format with day and month exchanged."""
    return fmt.replace("%d", "\0").replace("%m", "%d").replace("\0", "%m")


def _shape(value: str) -> str:
    """A value's character classes, runs collapsed: ``Andorra`` -> ``Aa``, ``AD`` -> ``A``."""
    classes = re.sub(r"[A-Z]", "A", re.sub(r"[a-z]", "a", re.sub(r"[0-9]", "9", value)))
    return re.sub(r"(.)\1+", r"\1", classes.strip())


def _split(line: str, delim: str) -> list[str]:
    return next(csv.reader([line], delimiter=delim or ","), [])


def _looks_like_data(first: list[str], rows: list[list[str]]) -> bool:
    """Whether the first line is data, not column names.

    Every field is shaped like the values below it, and one field is a value that occurs again
    below it (a column name is not repeated as a value).
    """
    if not rows:
        return False
    repeated = False
    for i, value in enumerate(first):
        below = [r[i] for r in rows if i < len(r)]
        if _shape(value) not in {_shape(v) for v in below}:
            return False
        repeated = repeated or value in below
    return repeated


def comment_names(lines: list[str], comment: str, delim: str, columns: int) -> list[str] | None:
    """Column names from the last leading comment line, when it has one name per column.

    Empty fields (a header line padded with extra delimiters) are dropped.
    """
    last = None
    for line in lines:
        if not line.lstrip().startswith(comment):
            break
        last = line.lstrip()[len(comment) :]
    if last is None or columns < 2:
        return None  # one name above one column is as likely a title as a name
    names = [f.strip() for f in _split(last, delim) if f.strip()]
    if names:  # '# columns: id, name' names 'id', not 'columns: id'
        names[0] = re.sub(r"^[\w ]+:\s+(?=\S)", "", names[0])
    if len(names) != columns or len(set(names)) != columns:
        return None
    return names


def _header(lines: list[str], opts: IngestOptions, sniffed: Sniffed, out: Settled) -> dict:
    """Settle whether the first line is column names, when only text columns show it.

    A table without a header line takes its names from the comment line above it when that
    line has one name per column.
    """
    if opts.header is not None or opts.names:
        return {}
    comment = sniffed.comment or opts.comment or ""
    columns = len(sniffed.types)
    names = comment_names(lines, comment, sniffed.delim, columns) if comment else None
    if not sniffed.header:
        if names and not sniffed.skip:
            out.notes.append(
                f"column names taken from the comment line above the table ({', '.join(names)});"
                " --names to name them otherwise"
            )
            return {"names": names}
        return {}
    if any(t != "VARCHAR" for _, t in sniffed.types):
        return {}  # a number or date column shows the first line is not data
    body = [ln for ln in lines if ln.strip() and not (comment and ln.lstrip().startswith(comment))]
    if not body:
        return {}
    first, rows = _split(body[0], sniffed.delim), [_split(ln, sniffed.delim) for ln in body[1:]]
    if names:
        out.notes.append(
            f"column names taken from the comment line ({', '.join(names)}); the first line "
            "is a row (--header to take it as the names)"
        )
        return {"names": names, "header": False}
    if comment:
        # Below a comment preamble, text columns give no sign the first line is names.
        out.notes.append(
            "the first line below the comments is text like the rows: read as a row, columns "
            "named column0... (--header to take it as column names, --names to name them)"
        )
        return {"header": False}
    if not _looks_like_data(first, rows):
        return {}
    out.notes.append(
        "the first line looks like the rows below it: read as a row, columns named "
        "column0... (--header to take it as column names, --names to name them)"
    )
    return {"header": False}


def _text_checks(sniffed: Sniffed) -> tuple[list[str], list[str]]:
    """SELECT expressions counting values that read only one way, and what each counts."""
    exprs: list[str] = []
    keys: list[str] = []
    for name, typ in sniffed.types:
        col = lake.sql_ident(name)
        if typ == "BOOLEAN":
            exprs.append(f"count(*) FILTER (WHERE lower(trim({col})) NOT IN {_TRUE_FALSE})::BIGINT")
            exprs.append(f"any_value({col}) FILTER (WHERE lower(trim({col})) NOT IN {_TRUE_FALSE})")
            keys += [f"bool:{name}", f"example:{name}"]
        fmt = {"DATE": sniffed.dates, "TIMESTAMP": sniffed.stamps}.get(typ, "")
        if day_first(fmt) is not None:
            other = lake.sql_string(swapped(fmt))
            exprs.append(
                f"count(*) FILTER (WHERE trim({col}) <> '' AND "
                f"try_strptime(trim({col}), {other}) IS NULL)::BIGINT"
            )
            keys.append(f"date:{name}")
    return exprs, keys


def _dates(found: dict[str, object], opts: IngestOptions, sniffed: Sniffed, out: Settled) -> dict:
    """Settle day-first against month-first for the DATE and TIMESTAMP formats."""
    update: dict[str, object] = {}
    for kind, fmt, option in (
        ("DATE", sniffed.dates, "date_format"),
        ("TIMESTAMP", sniffed.stamps, "timestamp_format"),
    ):
        first_day = day_first(fmt)
        given = opts.date_format if kind == "DATE" else opts.timestamp_format
        cols = [n for n, t in sniffed.types if t == kind]
        if first_day is None or given or not cols:
            continue
        both = all(found[f"date:{n}"] == 0 for n in cols)
        names = ", ".join(repr(n) for n in cols)
        if opts.dayfirst is not None:
            want_day = opts.dayfirst
            why = "--dayfirst" if want_day else "--no-dayfirst"
        elif both and opts.strict:
            out.text += cols
            out.notes.append(
                f"column(s) {names} kept as text (--strict): every value reads both day first "
                "and month first; --dayfirst, --no-dayfirst or --date-format reads them"
            )
            continue
        elif both:
            want_day, why = False, "every value reads both ways; --dayfirst to change"
        else:
            want_day, why = first_day, "a value reads only this way; --date-format to change"
        use = fmt if want_day == first_day else swapped(fmt)
        if use != fmt:
            update[option] = use
        order = "day first" if want_day else "month first"
        out.notes.append(f"dates in {names}: {order} ({use}) ({why})")
    return update


def _booleans(
    found: dict[str, object], opts: IngestOptions, sniffed: Sniffed, out: Settled
) -> None:
    """Keep Yes/No-style columns as text under ``--strict``; say so otherwise."""
    for name, typ in sniffed.types:
        if typ != "BOOLEAN" or not found[f"bool:{name}"]:
            continue
        example = found[f"example:{name}"]
        if opts.strict:
            out.text.append(name)
            out.notes.append(
                f"column {name!r} kept as text (--strict): values like {example!r} are not "
                "true/false"
            )
        else:
            out.notes.append(
                f"column {name!r}: values like {example!r} read as BOOLEAN true/false "
                f"(--text-column {name} or --strict keeps the text)"
            )


def settle(
    con: duckdb.DuckDBPyConnection,
    text_source: str,
    lines: list[str],
    opts: IngestOptions,
    sniffed: Sniffed,
) -> Settled:
    """Settle the readings of a sniffed CSV file that could go two ways.

    Args:
        con: the DuckDB connection.
        text_source: a ``read_csv(...)`` of the file with the sniffed dialect, every column
            read as VARCHAR.
        lines: the first lines of the file.
        opts: the ingest options (a field the user set is never changed).
        sniffed: the sniffer's decisions.
    """
    out = Settled()
    if sniffed.skip and opts.skip_rows is None:
        out.notes.append(
            f"skipped {sniffed.skip} line(s) above the table: they do not split like its rows "
            "(--skip-rows 0 reads them as rows)"
        )
    update = _header(lines, opts, sniffed, out)
    exprs, keys = _text_checks(sniffed)
    if exprs and not update:
        try:
            values = con.execute(f"SELECT {', '.join(exprs)} FROM {text_source}").fetchall()[0]
        except duckdb.Error:
            values = None  # the reading passes report what is wrong with the file
        if values is not None:
            found = dict(zip(keys, values, strict=True))
            update |= _dates(found, opts, sniffed, out)
            _booleans(found, opts, sniffed, out)
    if out.text:
        update["text_columns"] = [*opts.text_columns, *out.text]
    if update:
        out.options = opts.model_copy(update=update)
    return out
