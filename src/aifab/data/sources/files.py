"""Tabular files (csv, tsv, jsonl, json, parquet) streamed by DuckDB into a staged Parquet file.

The file never passes through Python: one ``COPY (SELECT * FROM read_csv(...)) TO ...`` runs
with DuckDB's memory cap, so a file larger than RAM ingests in bounded memory. Malformed CSV
lines are collected by ``store_rejects`` and handed back as quarantine items with line numbers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import duckdb

from aifab.core.errors import InvalidInputError, NotFoundError, first_line
from aifab.data import lake
from aifab.data.quarantine import QuarantineItem
from aifab.data.sources.options import FileFormat, IngestOptions
from aifab.data.sources.staged import Staged

#: Extension -> format; compressed variants (``.csv.gz``) are handled by DuckDB itself.
EXTENSIONS: dict[str, FileFormat] = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
}
_COMPRESSION = (".gz", ".zst")
#: How many rejected line numbers a result lists (all of them go to the quarantine).
_SHOWN_LINES = 10
_POLL_SECONDS = 0.1


def format_of(name: str) -> FileFormat | None:
    """The format implied by a file name's extension (``data.csv.gz`` -> csv), or ``None``."""
    lower = name.lower()
    for comp in _COMPRESSION:
        if lower.endswith(comp):
            lower = lower[: -len(comp)]
    return EXTENSIONS.get(Path(lower).suffix)


def _reader_sql(path: Path, fmt: FileFormat, opts: IngestOptions) -> str:
    p = lake.sql_string(str(path))
    if fmt in ("csv", "tsv"):
        delim = opts.delimiter or ("\t" if fmt == "tsv" else None)
        args = [
            f"header={str(opts.header).lower()}",
            f"sample_size={opts.sample_size}",
            "store_rejects=true",
        ]
        if delim is not None:
            args.append(f"delim={lake.sql_string(delim)}")
        return f"read_csv({p}, {', '.join(args)})"
    if fmt in ("jsonl", "json"):
        layout = "newline_delimited" if fmt == "jsonl" else "auto"
        return f"read_json({p}, format='{layout}', sample_size={opts.sample_size})"
    return f"read_parquet({p})"


def _run_copy(con: duckdb.DuckDBPyConnection, sql: str, dest: Path, label: str) -> None:
    """Run the COPY in a worker thread while a rich bar polls DuckDB's progress."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TimeElapsedColumn

    # query_progress() reports -1 unless the bar is enabled; DuckDB's own drawing stays off.
    con.execute("SET enable_progress_bar=true")
    con.execute("SET enable_progress_bar_print=false")
    failure: list[BaseException] = []

    def work() -> None:
        try:
            lake.copy_to_parquet(con, sql, dest)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            failure.append(exc)

    worker = threading.Thread(target=work, name="aifab-ingest-copy", daemon=True)
    columns = (BarColumn(), TaskProgressColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=100.0)
        worker.start()
        try:
            while worker.is_alive():
                worker.join(_POLL_SECONDS)
                done = con.query_progress()
                if done >= 0:
                    bar.update(task, completed=done)
        except KeyboardInterrupt:
            con.interrupt()
            worker.join()
            raise
    if failure:
        raise failure[0]


def _reject_items(con: duckdb.DuckDBPyConnection, path: Path) -> Iterator[QuarantineItem]:
    """One quarantine item per rejected line (of several errors on a line, the leftmost)."""
    cur = con.execute(
        "SELECT line, any_value(csv_line), "
        "arg_min(CAST(error_type AS VARCHAR), coalesce(column_idx, 0)), "
        "arg_min(error_message, coalesce(column_idx, 0)) "
        "FROM reject_errors GROUP BY line ORDER BY line"
    )
    while rows := cur.fetchmany(5000):
        for line, text, error_type, message in rows:
            rule = "csv." + str(error_type).lower().replace(" ", "_")
            yield QuarantineItem(
                rule=rule,
                reason=str(message),
                line=int(line),
                record={"source": str(path), "csv_line": text},
            )


def stage_file(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    opts: IngestOptions,
    dest: Path,
    *,
    progress: bool = False,
    fmt: FileFormat | None = None,
) -> Staged:
    """Stream a local tabular file into the Parquet file ``dest``.

    Args:
        con: the DuckDB connection (its memory cap bounds the copy).
        path: the file to read.
        opts: format, delimiter, header and type-sampling options.
        dest: where to write the staged Parquet file (in the workspace's ``tmp/``).
        progress: show a progress bar on stderr while copying.
        fmt: the format when known from elsewhere (a download's content-type).

    Raises:
        NotFoundError: the file does not exist.
        InvalidInputError: unknown extension, empty file, or content DuckDB cannot parse.
    """
    if not path.is_file():
        raise NotFoundError(f"{path}: no such file")
    fmt = opts.format or fmt or format_of(path.name)
    if fmt is None:
        known = ", ".join(sorted(EXTENSIONS))
        raise InvalidInputError(
            f"{path}: unknown file type {path.suffix or '(no extension)'!r}; "
            f"use one of {known} or pass --format"
        )
    if path.stat().st_size == 0:
        raise InvalidInputError(f"{path}: file is empty")
    sql = f"SELECT * FROM {_reader_sql(path, fmt, opts)}"
    try:
        if progress:
            _run_copy(con, sql, dest, f"ingest {path.name}")
        else:
            lake.copy_to_parquet(con, sql, dest)
    except duckdb.Error as exc:
        raise InvalidInputError(f"{path}: cannot read as {fmt}: {first_line(exc)}") from None
    staged = Staged(dest, str(path), "file", {"format": fmt})
    if fmt in ("csv", "tsv"):
        row = con.execute("SELECT count(DISTINCT line) FROM reject_errors").fetchall()[0]
        staged.rejected = int(row[0]) if row else 0
        if staged.rejected:
            first = con.execute(
                f"SELECT DISTINCT line FROM reject_errors ORDER BY line LIMIT {_SHOWN_LINES}"
            ).fetchall()
            staged.rejected_lines = tuple(int(r[0]) for r in first)
            staged.rejects = _reject_items(con, path)
    return staged
