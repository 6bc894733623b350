"""JSON and JSON Lines files read by DuckDB, with bad JSONL lines quarantined by line number.

DuckDB rejects a whole JSONL file for one malformed line; then one pass in Python splits the
file into its valid lines (read by DuckDB as usual) and its broken ones (quarantined).
Types are inferred from every row unless ``sample_size`` is given, so a value that changes type
past a sample (``1.5`` after 20,480 integers) widens its column instead of being rounded.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import duckdb

from aifab.core.errors import InvalidInputError, first_line
from aifab.data import lake
from aifab.data.quarantine import QuarantineItem
from aifab.data.sources.exact_casts import WIDEN_MARK, checked_expr, wider_type
from aifab.data.sources.options import IngestOptions
from aifab.data.sources.staged import Staged, refuse_share

_SHOWN_LINES = 10
_MAX_RECORD = 1000
#: DuckDB's default largest JSON object; a records file is one object, so it may need more.
_MAX_OBJECT = 16 * 1024 * 1024


def _reader(path: Path, fmt: str, opts: IngestOptions, columns: str = "") -> str:
    # The whole file by default: a sampled type silently rounds later values (1.5 -> 2).
    sample = opts.sample_size if "sample_size" in opts.model_fields_set else -1
    p = lake.sql_string(str(path))
    extra = f", {columns}" if columns else ""
    if fmt == "jsonl":
        return f"read_json({p}, format='newline_delimited', sample_size={sample}{extra})"
    if not opts.records_field:
        return f"read_json({p}, format='auto', sample_size={sample}{extra})"
    size = max(_MAX_OBJECT, path.stat().st_size + 1)
    field = ".".join(lake.sql_ident(part) for part in opts.records_field.split("."))
    return (
        f"(SELECT __r.* FROM (SELECT unnest({field}) AS __r FROM read_json({p}, "
        f"format='auto', records=true, maximum_object_size={size}, sample_size={sample})))"
    )


def _check_records(con: duckdb.DuckDBPyConnection, path: Path, dest: Path) -> None:
    """Refuse a JSON file read as one row whose records sit in its one list field.

    Raises:
        InvalidInputError: naming the ``--records-field`` that reads the records.
    """
    p = lake.sql_string(str(dest))
    if int(con.execute(f"SELECT count(*) FROM read_parquet({p})").fetchall()[0][0]) != 1:
        return
    described = con.execute(f"DESCRIBE SELECT * FROM read_parquet({p})").fetchall()
    lists = [str(name) for name, col_type, *_ in described if str(col_type).endswith("[]")]
    if len(lists) == 1:
        raise InvalidInputError(
            f"{path}: the file is one object whose records look like the list in field "
            f"{lists[0]!r}; pass --records-field {lists[0]} to read them as rows"
        )


def _columns_sql(types: list[tuple[str, str]]) -> str:
    pairs = ", ".join(f"{lake.sql_string(n)}: {lake.sql_string(t)}" for n, t in types)
    return f"columns={{{pairs}}}"


def _copy_exact(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    fmt: str,
    opts: IngestOptions,
    copy: Callable[[str], None],
) -> dict[str, str]:
    """Copy the file; DOUBLE columns are read as text and cast checked (20-digit ids stay text).

    Returns:
        The columns widened to another type than the one DuckDB inferred.
    """
    reader = _reader(path, fmt, opts)
    if fmt == "json" and opts.records_field:
        copy(f"SELECT * FROM {reader}")
        return {}
    types = [(r[0], r[1]) for r in con.execute(f"DESCRIBE SELECT * FROM {reader}").fetchall()]
    if not any(t == "DOUBLE" for _, t in types):
        copy(f"SELECT * FROM {reader}")
        return {}
    widened: dict[str, str] = {}
    while True:
        final = [(n, widened.get(n, t)) for n, t in types]
        text = [(n, "VARCHAR" if t == "DOUBLE" else t) for n, t in final]
        # Only DOUBLE columns are read as text; integers and the rest pass through as typed.
        exprs = ", ".join(
            checked_expr(i, n, t, opts) if t == "DOUBLE" else lake.sql_ident(n)
            for i, (n, t) in enumerate(final)
        )
        try:
            copy(f"SELECT {exprs} FROM {_reader(path, fmt, opts, _columns_sql(text))}")
            return widened
        except duckdb.Error as exc:
            found = WIDEN_MARK.search(str(exc))
            if found is None:
                raise
            name, current = final[int(found.group(1))]
            widened[name] = wider_type(current, found.group(2).splitlines()[0])


def split_bad_lines(path: Path, good: Path) -> list[QuarantineItem]:
    """Copy the valid JSON lines of ``path`` into ``good``; return the others as rejects."""
    bad: list[QuarantineItem] = []
    with (
        path.open("r", encoding="utf-8", errors="strict", newline="") as fin,
        good.open("w", encoding="utf-8") as fout,
    ):
        for number, line in enumerate(fin, 1):
            if not line.strip():
                continue
            try:
                json.loads(line)
            except ValueError as exc:
                text = line.rstrip("\r\n")
                bad.append(
                    QuarantineItem(
                        rule="json.malformed",
                        reason=f"malformed JSON: {exc}",
                        line=number,
                        record={"source": str(path), "json_line": text[:_MAX_RECORD]},
                    )
                )
                continue
            fout.write(line if line.endswith("\n") else line + "\n")
    return bad


def _records_error(exc: duckdb.Error, path: Path, opts: IngestOptions) -> InvalidInputError:
    text = first_line(exc)
    if opts.records_field and ("not found" in text.lower() or "Binder" in str(exc)):
        return InvalidInputError(
            f"{path}: no list of records at {opts.records_field!r} (--records-field): {text}"
        )
    hint = "" if opts.records_field else "; if the records sit under a key, pass --records-field"
    return InvalidInputError(f"{path}: cannot read as json: {text}{hint}")


def stage_json(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    fmt: str,
    opts: IngestOptions,
    dest: Path,
    copy: Callable[[str], None],
) -> Staged:
    """Copy a JSON/JSONL file into ``dest``; malformed JSONL lines become quarantine items.

    Raises:
        InvalidInputError: content DuckDB cannot read, a missing ``records_field``, or a file
            of which too few lines are valid JSON.
    """
    bad: list[QuarantineItem] = []
    widened: dict[str, str] = {}
    read = path
    try:
        try:
            widened = _copy_exact(con, read, fmt, opts, copy)
        except duckdb.Error as exc:
            if fmt != "jsonl" or "Malformed JSON" not in str(exc):
                raise
            read = lake.staging_path(".jsonl")
            bad = split_bad_lines(path, read)
            kept = sum(1 for _ in read.open(encoding="utf-8"))
            why = f"{len(bad)} malformed JSON lines (line {bad[0].line}: {bad[0].reason})"
            refuse_share(str(path), kept, len(bad), opts.min_kept_share, why)
            if kept:
                widened = _copy_exact(con, read, fmt, opts, copy)
    except duckdb.Error as exc:
        if fmt == "json":
            raise _records_error(exc, path, opts) from None
        raise InvalidInputError(f"{path}: cannot read as {fmt}: {first_line(exc)}") from None
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            f"{path}: not UTF-8 at byte {exc.start}; JSON files must be UTF-8"
        ) from None
    finally:
        if read != path:
            read.unlink(missing_ok=True)
    if fmt == "json" and not opts.records_field:
        _check_records(con, path, dest)
    details: dict[str, object] = {"format": fmt}
    if opts.records_field and fmt == "json":
        details["records_field"] = opts.records_field
    if widened:
        details["widened"] = widened
    staged = Staged(dest, str(path), "file", details, rejected=len(bad), rejects=bad)
    staged.rejected_lines = tuple(b.line for b in bad[:_SHOWN_LINES] if b.line is not None)
    return staged
