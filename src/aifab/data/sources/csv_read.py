"""CSV/TSV files read by DuckDB so that no row is lost or changed without being counted.

DuckDB sniffs the dialect, header and types. Integer columns are then read as text and cast by
checked expressions: a value the sniffed type would round (``1.5`` in a BIGINT column, past the
sniffing sample) stops the copy, and the column is widened (to HUGEINT, DOUBLE or VARCHAR)
before reading again. DOUBLE columns holding a whole number beyond 2**53 are re-read as text,
so that one with more digits than a DOUBLE keeps (a 20-digit id) becomes VARCHAR.
Rows missing trailing fields are padded with nulls (counted), unless ``strict``; lines that
still fail are quarantined with their line numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import duckdb

from aifab.core.errors import InvalidInputError
from aifab.data import lake
from aifab.data.quarantine import QuarantineItem
from aifab.data.sources import csv_hints, csv_infer, csv_quotes
from aifab.data.sources.csv_diagnose import HINTS, diagnose, refuse_if_few_kept
from aifab.data.sources.exact_casts import INTEGERS, WIDEN_MARK, checked_expr, wider_type
from aifab.data.sources.options import IngestOptions
from aifab.data.sources.staged import Staged

_SHOWN_LINES = 10
_MAX_PASSES = 12
_SERIAL_ONLY = "parallel scanner does not support null_padding"
#: Columns from which a copy runs without the common-subexpression optimizer (see _wide_copy).
_WIDE_COLUMNS = 200


@dataclass
class _Plan:
    """How the next read treats the file: its sniffed dialect, padding and column types."""

    dialect: list[str]
    types: list[tuple[str, str]]
    padding: bool = False
    widened: dict[str, str] = field(default_factory=dict)
    #: The rejects table of the pass that found rows missing fields (before padding).
    padded_from: str = ""
    #: DOUBLE columns read as text, because a value may have more digits than a DOUBLE holds.
    text_doubles: frozenset[str] = frozenset()
    #: Read by one thread: DuckDB's parallel reader cannot pad rows around quoted newlines.
    serial: bool = False
    #: The sniffed delimiter and comment prefix ("" for none).
    delim: str = ","
    comment: str = ""
    #: The sniffed date and timestamp formats ("" for none).
    dates: str = ""
    stamps: str = ""
    #: Lines the sniffer skipped above the table.
    skip: int = 0

    def as_text(self, name: str, col_type: str) -> bool:
        """Whether column ``name`` is read as text and cast by a checked expression."""
        return col_type in INTEGERS or (col_type == "DOUBLE" and name in self.text_doubles)

    @property
    def header(self) -> bool:
        """Whether the first (non-comment) line holds the column names."""
        return "header=true" in self.dialect

    def but(self, **changes: object) -> _Plan:
        """A copy with ``changes``."""
        return replace(self, **changes)  # type: ignore[arg-type]


def _auto_args(
    path: Path, fmt: str, opts: IngestOptions, padding: bool, header: bool | None = None
) -> str:
    """``read_csv`` arguments that let DuckDB sniff, constrained by the user's options."""
    args = [lake.sql_string(str(path)), f"sample_size={opts.sample_size}"]
    header = opts.header if opts.header is not None else header
    if header is None and opts.names:
        header = False
    if header is not None:
        args.append(f"header={str(header).lower()}")
    delim = opts.delimiter or ("\t" if fmt == "tsv" else None)
    named = {
        "delim": delim,
        "quote": opts.quote,
        "escape": opts.escape,
        "comment": opts.comment,
        "dateformat": opts.date_format,
        "timestampformat": opts.timestamp_format,
    }
    args += [f"{k}={lake.sql_string(v)}" for k, v in named.items() if v is not None]
    if opts.skip_rows is not None:
        args.append(f"skip={opts.skip_rows}")
    if opts.names:
        args.append(f"names=[{', '.join(lake.sql_string(n) for n in opts.names)}]")
    if opts.text_columns:
        text = ", ".join(f"{lake.sql_string(n)}: 'VARCHAR'" for n in opts.text_columns)
        args.append(f"types={{{text}}}")
    return ", ".join(args + _read_args(opts) + [f"null_padding={str(padding).lower()}"])


def _read_args(opts: IngestOptions) -> list[str]:
    """Arguments that change how values are read, not how the dialect is sniffed."""
    args = []
    if opts.decimal != ".":
        args.append(f"decimal_separator={lake.sql_string(opts.decimal)}")
    if opts.max_line_size:
        args.append(f"max_line_size={opts.max_line_size}")
    return args


def _plan_args(path: Path, opts: IngestOptions, plan: _Plan, table: str) -> str:
    """``read_csv`` arguments of one pass: the sniffed dialect, our types, rejects kept."""
    types = {n: "VARCHAR" if plan.as_text(n, t) else t for n, t in _types(plan)}
    columns = ", ".join(f"{lake.sql_string(n)}: {lake.sql_string(t)}" for n, t in types.items())
    args = [
        lake.sql_string(str(path)),
        "auto_detect=false",
        *plan.dialect,
        *_read_args(opts),
        f"null_padding={str(plan.padding).lower()}",
        *(["parallel=false"] if plan.serial else []),
        f"store_rejects=true, rejects_table='{table}', rejects_scan='{table}_scan'",
        f"columns={{{columns}}}",
    ]
    return f"read_csv({', '.join(args)})"


def _types(plan: _Plan) -> list[tuple[str, str]]:
    return [(n, plan.widened.get(n, t)) for n, t in plan.types]


def _sniff(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    fmt: str,
    opts: IngestOptions,
    padding: bool,
    header: bool | None = None,
) -> _Plan:
    """DuckDB's sniffed dialect and column types; every later pass reads with exactly these."""
    auto = _auto_args(path, fmt, opts, padding, header)
    delim, quote, escape, newline, comment, skip, header, dates, stamps, columns = con.execute(
        "SELECT Delimiter, Quote, Escape, NewLineDelimiter, Comment, SkipRows, HasHeader, "
        f"DateFormat, TimestampFormat, Columns FROM sniff_csv({auto})"
    ).fetchall()[0]
    types = [(c["name"], c["type"]) for c in columns]
    given = {
        "delim": delim,
        "quote": quote,
        "escape": escape,
        "new_line": newline,
        "comment": comment,
        "dateformat": dates,
        "timestampformat": stamps,
    }
    dialect = [
        f"{k}={lake.sql_string('' if v == '(empty)' else v)}"
        for k, v in given.items()
        if v is not None
    ]
    dialect += [f"skip={int(skip)}", f"header={str(bool(header)).lower()}"]
    plain = {k: "" if v in (None, "(empty)") else str(v) for k, v in given.items()}
    return _Plan(
        dialect,
        types,
        padding,
        delim=plain["delim"],
        comment=plain["comment"],
        dates=plain["dateformat"],
        stamps=plain["timestampformat"],
        skip=int(skip),
    )


def _first_plan(con: duckdb.DuckDBPyConnection, path: Path, fmt: str, opts: IngestOptions) -> _Plan:
    """The sniffed plan; on a ragged file, the one DuckDB finds when it may pad rows.

    Rows of unequal length can make the strict sniffer settle for one column, or take a
    header narrower than its rows for a short data row.
    """
    try:
        plan = _sniff(con, path, fmt, opts, padding=False)
    except duckdb.Error:
        plan = None  # the strict sniffer found no dialect at all
    settled = plan is not None and len(plan.types) > 1 and not plan.skip
    if settled and plan is not None and (plan.header or opts.header is not None):
        return plan
    padded = _sniff(con, path, fmt, opts, padding=True)
    if plan is not None:
        one_column = len(plan.types) <= 1 < len(padded.types)
        # Rows of 3 and 4 fields can make the strict sniffer skip every row above the
        # first run of 4-field rows, as if they were a preamble.
        fewer_skipped = padded.skip < plan.skip and len(padded.types) >= len(plan.types)
        if not (one_column or padded.header or fewer_skipped):
            return plan
    # Columns past the header that DuckDB named itself come from over-long rows; they stay
    # rejected unless most rows are that wide (see _next_plan).
    types = list(padded.types)
    if padded.header:
        while len(types) > 1 and types[-1][0] == f"column{len(types) - 1}":
            types.pop()
    return padded.but(padding=False, types=types)


def _settle(
    con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions, plan: _Plan
) -> csv_infer.Settled:
    """Settle what the sniffed plan reads two ways (dates, booleans, a text header)."""
    columns = ", ".join(f"{lake.sql_string(n)}: 'VARCHAR'" for n, _ in plan.types)
    args = [
        lake.sql_string(str(path)),
        "auto_detect=false",
        *plan.dialect,
        *_read_args(opts),
        "ignore_errors=true",
        f"columns={{{columns}}}",
    ]
    sniffed = csv_infer.Sniffed(
        plan.types, plan.header, plan.delim, plan.comment, plan.dates, plan.stamps, plan.skip
    )
    lines = csv_hints.sample_lines(path)
    return csv_infer.settle(con, f"read_csv({', '.join(args)})", lines, opts, sniffed)


def _rejects(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, set[int]]:
    """Rejected line numbers per error type of one pass."""
    out: dict[str, set[int]] = {}
    for kind, line in con.execute(f"SELECT DISTINCT error_type, line FROM {table}").fetchall():
        out.setdefault(str(kind), set()).add(int(line))
    return out


def _cast_columns(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    rows = con.execute(f"SELECT DISTINCT column_name FROM {table} WHERE error_type = 'CAST'")
    return {str(r[0]) for r in rows.fetchall() if r[0] is not None}


def _next_plan(
    con: duckdb.DuckDBPyConnection,
    plan: _Plan,
    table: str,
    kept: int,
    rewiden: Callable[[bool], _Plan],
) -> _Plan | None:
    """The plan of another pass that keeps more rows, or ``None`` when this one is final."""
    found = _rejects(con, table)
    wide = len(found.get("TOO MANY COLUMNS", ()))
    if wide and (wide >= kept or not plan.header) and not plan.padded_from:
        # Most rows are wider than the header, or there is no header (rows of 3 and 4 fields):
        # let DuckDB name the extra columns.
        return rewiden(plan.header).but(padding=True, padded_from=table, widened=plan.widened)
    if not plan.padding and "MISSING COLUMNS" in found:
        return plan.but(padding=True, padded_from=table)
    cast = {n for n in _cast_columns(con, table) if plan.widened.get(n) != "VARCHAR"}
    if not cast:
        return None
    return plan.but(widened={**plan.widened, **dict.fromkeys(cast, "VARCHAR")})


def _big_double(con: duckdb.DuckDBPyConnection, dest: Path, names: list[str]) -> str | None:
    """The first of the DOUBLE columns ``names`` of ``dest`` holding a whole number >= 2**53."""
    cols = ", ".join(lake.sql_ident(n) for n in names)
    found = con.execute(
        f"SELECT name FROM (UNPIVOT (SELECT {cols} FROM read_parquet({lake.sql_string(str(dest))}))"
        f" ON {cols} INTO NAME name VALUE value) WHERE isfinite(value) AND "
        f"abs(value) >= {2**53} AND value = trunc(value) LIMIT 1"
    ).fetchall()
    return str(found[0][0]) if found else None


def _wide_copy(
    con: duckdb.DuckDBPyConnection,
    copy: Callable[[str], None],
    source: str,
    plan: _Plan,
    opts: IngestOptions,
    dest: Path,
) -> str | None:
    """Copy ``source`` into ``dest`` with checked casts; return a DOUBLE column to read as text.

    On wide tables, DOUBLE columns are copied as they are and checked afterwards in one
    unpivoted query, and the copy runs without DuckDB's common-subexpression pass: a checked
    expression per column costs time quadratic in the columns (2,000 columns: 14 s with the
    pass, 3 s without; 1,000 DOUBLE columns: 5 s checked, 0.7 s copied and checked after).
    """
    types = _types(plan)
    wide = len(types) > _WIDE_COLUMNS
    after = [n for n, t in types if wide and t == "DOUBLE" and not plan.as_text(n, t)]
    exprs = ", ".join(
        lake.sql_ident(n) if n in after else checked_expr(i, n, t, opts, plan.as_text(n, t))
        for i, (n, t) in enumerate(types)
    )
    if not wide:
        copy(f"SELECT {exprs} FROM {source}")
        return None
    con.execute("SET disabled_optimizers = 'common_subexpressions'")
    try:
        copy(f"SELECT {exprs} FROM {source}")
    finally:
        con.execute("RESET disabled_optimizers")
    return _big_double(con, dest, after) if after else None


def _read(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    opts: IngestOptions,
    plan: _Plan,
    table: str,
    copy: Callable[[str], None],
    dest: Path,
) -> _Plan | None:
    """One pass; return the plan of the next pass when a column had to be widened."""
    types = _types(plan)
    try:
        big = _wide_copy(con, copy, _plan_args(path, opts, plan, table), plan, opts, dest)
    except duckdb.Error as exc:
        found = WIDEN_MARK.search(str(exc))
        if found is None and _SERIAL_ONLY in str(exc) and not plan.serial:
            return plan.but(serial=True)  # a quoted field spans lines in a padded file
        if found is None:
            raise
        name, current = types[int(found.group(1))]
        value = found.group(2).splitlines()[0] if found.group(2) else ""
        if not plan.as_text(name, current):
            # Read this DOUBLE column as text next time, to see the digits it really has.
            return plan.but(text_doubles=plan.text_doubles | {name})
        if opts.strict:
            raise InvalidInputError(
                f"column {name!r} holds {value!r}, which is not {current} (the type sniffed "
                f"from the first {opts.sample_size} rows); drop --strict to widen the type, or "
                "pass --sample-size -1"
            ) from None
        wider = wider_type(current, value, opts.decimal)
        return plan.but(widened={**plan.widened, name: wider})
    if big is not None:  # a wide table's DOUBLE column, checked after the copy
        return plan.but(text_doubles=plan.text_doubles | {big})
    return None


def _reject_items(
    con: duckdb.DuckDBPyConnection, table: str, source: str, strict: bool
) -> Iterator[QuarantineItem]:
    """One quarantine item per rejected line (of several errors on a line, the leftmost)."""
    cur = con.execute(
        "SELECT line, any_value(csv_line), "
        "arg_min(CAST(error_type AS VARCHAR), coalesce(column_idx, 0)), "
        "arg_min(error_message, coalesce(column_idx, 0)) "
        f"FROM {table} GROUP BY line ORDER BY line"
    )
    while rows := cur.fetchmany(5000):
        for line, text, error_type, message in rows:
            rule = "csv." + str(error_type).lower().replace(" ", "_")
            hint = HINTS.get(str(error_type))
            if strict and str(error_type) in ("MISSING COLUMNS", "TOO MANY COLUMNS"):
                hint = ("", "without --strict: short rows are padded, extra fields named")
            yield QuarantineItem(
                rule=rule,
                reason=f"{message} (try {hint[1]})" if hint else str(message),
                line=int(line),
                record={"source": source, "csv_line": text},
            )


def _count(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    return int(con.execute(sql).fetchall()[0][0])


def pq_rows(path: Path) -> int:
    """Rows in a Parquet file, from its footer."""
    import pyarrow.parquet as pq

    return int(pq.read_metadata(path).num_rows)


def _passes(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    fmt: str,
    opts: IngestOptions,
    copy: Callable[[str], None],
    dest: Path,
    first: _Plan,
) -> tuple[_Plan, str]:
    """Read until no pass can keep more rows; return the last plan and its rejects table."""
    plan: _Plan | None = first
    rewiden = partial(_sniff, con, path, fmt, opts, True)
    passes = 0
    while plan is not None:
        passes += 1
        table, final = f"aifab_rejects_{passes}", plan
        # A second read of the same connection (without unbalanced lines) reuses the names.
        con.execute(f"DROP TABLE IF EXISTS {table}; DROP TABLE IF EXISTS {table}_scan")
        plan = _read(con, path, opts, plan, table, copy, dest)
        if plan is None and not opts.strict and passes < _MAX_PASSES:
            plan = _next_plan(con, final, table, pq_rows(dest), rewiden)
    return final, table


def _stray_quotes(plan: _Plan, path: Path, opts: IngestOptions) -> bool:
    """Whether the sniffer gave up quoting although the file quotes fields (a stray quote)."""
    if opts.quote is not None or opts.strict or "quote=''" not in plan.dialect:
        return False
    if path.suffix.lower() == ".zst":
        return False  # no zstd reader in the standard library to take lines out with
    return csv_quotes.has_quoted_fields(path)


def _unterminated(
    con: duckdb.DuckDBPyConnection, table: str, path: Path, opts: IngestOptions
) -> bool:
    """Whether a pass rejected unterminated quotes that the sniffing sample did not show.

    Such a quote swallows the lines up to the next quote into one rejected row, so those
    lines would vanish uncounted: the file is read again without its unbalanced lines.
    """
    if opts.quote is not None or opts.strict or path.suffix.lower() == ".zst":
        return False
    return bool(_count(con, f"SELECT count(*) FROM {table} WHERE error_type = 'UNQUOTED VALUE'"))


def _space_aligned(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    opts: IngestOptions,
    dest: Path,
    copy: Callable[[str], None],
    source: str,
    skip: int,
) -> Staged:
    """Read a table aligned with runs of spaces as the tab-separated text it stands for.

    ``skip`` non-blank lines above the table (a free-text preamble) are left out.
    """
    tabs = lake.staging_path(".tsv")
    try:
        comment = opts.comment or csv_hints.comment_prefix(csv_hints.sample_lines(path))
        csv_hints.spaces_to_tabs(path, tabs, skip, comment)
        inner = opts.model_copy(update={"skip_rows": None})
        staged = stage_csv(con, tabs, "tsv", inner, dest, copy, source)
    finally:
        tabs.unlink(missing_ok=True)
    staged.details["delimiter"] = "spaces"
    if skip and opts.skip_rows is None:
        note = (
            f"skipped {skip} line(s) of text above a table aligned with spaces "
            "(--skip-rows N to set how many lines to skip)"
        )
        staged.details["inferred"] = [note, *staged.details.get("inferred", [])]
    return staged


def _without_unbalanced_lines(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    fmt: str,
    opts: IngestOptions,
    dest: Path,
    copy: Callable[[str], None],
    source: str,
) -> Staged:
    clean = lake.staging_path(".csv")
    try:
        bad, removed = csv_quotes.split_unbalanced(path, clean, source)
        quoted = opts.model_copy(update={"quote": '"'})
        staged = stage_csv(con, clean, fmt, quoted, dest, copy, source)
    finally:
        clean.unlink(missing_ok=True)
    return csv_quotes.merge(staged, bad, removed)


def stage_csv(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    fmt: str,
    opts: IngestOptions,
    dest: Path,
    copy: Callable[[str], None],
    source: str,
) -> Staged:
    """Copy the CSV/TSV ``path`` (UTF-8 text) into ``dest``, widening and padding as needed.

    Args:
        con: the DuckDB connection.
        path: the file to read (already UTF-8: see :mod:`text_decode`).
        fmt: ``csv`` or ``tsv``.
        opts: the ingest options.
        dest: the staged Parquet file.
        copy: runs ``COPY (select) TO dest`` (with or without a progress bar).
        source: the original file, recorded with quarantined lines.

    Raises:
        InvalidInputError: a file DuckDB cannot read (with its cause and the option that
            fixes it), or one that keeps too few of its rows.
    """
    try:
        first = _first_plan(con, path, fmt, opts)
        hinted = csv_hints.second_opinion(path, fmt, opts, first.delim, first.comment, first.header)
        notes: list[str] = []
        if hinted is not None:
            if hinted.names and hinted.names[0] == csv_hints.ROW_NAME and not opts.names:
                notes.append(
                    "the header has one name fewer than the rows (R's write.table row names): "
                    f"the first column is named {csv_hints.ROW_NAME!r} (--names to change)"
                )
            opts, first = hinted, _first_plan(con, path, fmt, hinted)
        skip = csv_hints.spaced(path, fmt, opts, len(first.types))
        if skip is not None:
            return _space_aligned(con, path, opts, dest, copy, source, skip)
        if _stray_quotes(first, path, opts):
            return _without_unbalanced_lines(con, path, fmt, opts, dest, copy, source)
        settled = _settle(con, path, opts, first)
        if settled.options is not None:
            opts, first = settled.options, _first_plan(con, path, fmt, settled.options)
        final, table = _passes(con, path, fmt, opts, copy, dest, first)
        if _unterminated(con, table, path, opts):
            return _without_unbalanced_lines(con, path, fmt, opts, dest, copy, source)
    except duckdb.Error as exc:
        raise diagnose(exc, source, path, fmt, opts) from None
    rows = pq_rows(dest)
    rejected = _count(con, f"SELECT count(DISTINCT line) FROM {table}")
    padded = 0
    if final.padded_from:
        padded = _count(
            con,
            f"SELECT count(DISTINCT line) FROM {final.padded_from} WHERE error_type = "
            f"'MISSING COLUMNS' AND line NOT IN (SELECT line FROM {table})",
        )
    refuse_if_few_kept(con, source, path, fmt, opts, rows, rejected, table, final.header)
    details: dict[str, object] = {"format": fmt, "columns": len(final.types)}
    if padded:
        details["padded"] = padded
    if final.widened:
        details["widened"] = dict(final.widened)
    if len(final.types) == 1 and csv_hints.wordy(path):
        notes.append(
            "read as one column of whole lines; --delimiter, or --skip-rows N above a "
            "table, splits them into columns"
        )
    if notes or settled.notes:
        details["inferred"] = notes + settled.notes
    staged = Staged(dest, source, "file", details)
    staged.rejected = rejected
    if rejected:
        shown = con.execute(f"SELECT DISTINCT line FROM {table} ORDER BY line LIMIT {_SHOWN_LINES}")
        staged.rejected_lines = tuple(int(r[0]) for r in shown.fetchall())
        staged.rejects = _reject_items(con, table, source, opts.strict)
    return staged
