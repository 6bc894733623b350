"""Tabular files (csv, tsv, jsonl, json, parquet, xlsx, arrow) staged as one Parquet file.

Text formats never pass through Python row by row: ``COPY (SELECT ... FROM read_csv(...)) TO``
runs with DuckDB's memory cap, so a file larger than RAM ingests in bounded memory (see
:mod:`csv_read` and :mod:`json_read` for how rows are kept, padded or quarantined).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import duckdb

from aifab.core.errors import InvalidInputError, NotFoundError, first_line
from aifab.data import lake
from aifab.data.sources import text_decode
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
    ".xlsx": "xlsx",
    ".xlsm": "xlsx",
    ".feather": "arrow",
    ".arrow": "arrow",
    ".ipc": "arrow",
    ".orc": "orc",
    ".arff": "arff",
}
#: Formats people ask for that aifab does not read, and what to do instead.
_NOT_READ = {
    ".xml": "XML is not read: convert it to CSV or JSON Lines first "
    "(e.g. pandas.read_xml(path).to_csv(...))",
    ".sqlite": "SQLite databases are not read: export a table to CSV "
    "(sqlite3 -csv -header db 'SELECT ...')",
    ".db": "databases are not read: export a table to CSV or Parquet",
    ".sav": "SPSS files are not read: save the data as CSV",
    ".sas7bdat": "SAS files are not read: export the data as CSV (e.g. pandas.read_sas)",
    ".dta": "Stata files are not read: export the data as CSV (e.g. pandas.read_stata)",
}
_COMPRESSION = (".gz", ".zst")
_POLL_SECONDS = 0.1


def format_of(name: str) -> FileFormat | None:
    """The format implied by a file name's extension (``data.csv.gz`` -> csv), or ``None``."""
    lower = name.lower()
    for comp in _COMPRESSION:
        if lower.endswith(comp):
            lower = lower[: -len(comp)]
    return EXTENSIONS.get(Path(lower).suffix)


def _text_file(path: Path, opts: IngestOptions) -> tuple[Path, str | None]:
    """The UTF-8 file DuckDB should read for ``path``, and the encoding it was converted from.

    A BOM or ``--encoding`` other than UTF-8 gives a transcoded copy in the workspace's
    ``tmp/`` (a BOM wins over ``--encoding``, which wins over UTF-16 recognized by its zero
    bytes; a gzip'd file is decompressed into the copy);
    binary content is refused instead of read as garbage.

    Raises:
        InvalidInputError: binary content, or text that is not UTF-8 without an encoding given.
    """
    enc = text_decode.check_encoding(opts.encoding) if opts.encoding else None
    if path.name.lower().endswith(_COMPRESSION):
        # DuckDB decompresses UTF-8 itself; other encodings are decompressed while transcoding.
        if enc in (None, "utf-8"):
            return path, None
        if not path.name.lower().endswith(".gz"):
            raise InvalidInputError(
                f"{path}: --encoding {enc} needs the text decompressed first (only .gz files "
                "are decompressed while transcoding); decompress it and ingest the plain file"
            )
        out = lake.staging_path(".csv")
        text_decode.transcode(path, out, enc)
        return out, enc
    with path.open("rb") as fh:
        head = fh.read(text_decode.HEAD_BYTES)
    enc = text_decode.bom_encoding(head) or enc or text_decode.utf16_without_bom(head)
    if enc in (None, "utf-8", "utf-8-sig"):
        at = text_decode.binary_offset(head)
        if at is not None:
            raise InvalidInputError(
                f"{path}: not text: binary byte 0x{head[at]:02x} at byte {at} (a compressed or "
                "binary file, or UTF-16 without a BOM: pass --encoding utf-16-le)"
            )
        return path, None
    out = lake.staging_path(".csv")
    text_decode.transcode(path, out, enc)
    return out, enc


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


def _copier(
    con: duckdb.DuckDBPyConnection, dest: Path, label: str, progress: bool
) -> Callable[[str], None]:
    """A function that copies a SELECT into ``dest``, with a progress bar when asked."""
    if progress:
        return lambda sql: _run_copy(con, sql, dest, label)
    return lambda sql: lake.copy_to_parquet(con, sql, dest)


def _stage_csv(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    fmt: FileFormat,
    opts: IngestOptions,
    dest: Path,
    copy: Callable[[str], None],
) -> Staged:
    from aifab.data.sources.csv_read import stage_csv

    text, encoding = _text_file(path, opts)
    try:
        staged = stage_csv(con, text, fmt, opts, dest, copy, str(path))
    finally:
        if text != path:
            text.unlink(missing_ok=True)
    if encoding:
        staged.details["encoding"] = encoding
    return staged


def _stage_arff(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    opts: IngestOptions,
    dest: Path,
    copy: Callable[[str], None],
) -> Staged:
    from aifab.data.sources.arff_read import arff_to_csv
    from aifab.data.sources.csv_read import stage_csv

    text = lake.staging_path(".csv")
    try:
        arff_to_csv(path, text)
        csv_opts = opts.model_copy(update={"header": True, "delimiter": ",", "comment": None})
        staged = stage_csv(con, text, "csv", csv_opts, dest, copy, str(path))
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{path}: not UTF-8 text ({exc.reason})") from None
    finally:
        text.unlink(missing_ok=True)
    staged.details["format"] = "arff"
    return staged


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
        if path.suffix.lower() in _NOT_READ:
            raise InvalidInputError(f"{path}: {_NOT_READ[path.suffix.lower()]}")
        known = ", ".join(sorted(EXTENSIONS))
        raise InvalidInputError(
            f"{path}: unknown file type {path.suffix or '(no extension)'!r}; aifab reads "
            f"{known}, zip/tar archives of one table, documents and images (--format csv "
            "reads a delimited text file under another name)"
        )
    if path.stat().st_size == 0:
        raise InvalidInputError(f"{path}: file is empty")
    copy = _copier(con, dest, f"ingest {path.name}", progress)
    if fmt in ("csv", "tsv"):
        return _stage_csv(con, path, fmt, opts, dest, copy)
    if fmt in ("jsonl", "json"):
        from aifab.data.sources.json_read import stage_json

        return stage_json(con, path, fmt, opts, dest, copy)
    if fmt == "arff":
        return _stage_arff(con, path, opts, dest, copy)
    if fmt in ("xlsx", "arrow", "orc"):
        from aifab.data.sources.sheets import stage_table

        return stage_table(con, path, fmt, opts, dest)
    try:
        copy(f"SELECT * FROM read_parquet({lake.sql_string(str(path))})")
    except duckdb.Error as exc:
        raise InvalidInputError(f"{path}: cannot read as {fmt}: {first_line(exc)}") from None
    return Staged(dest, str(path), "file", {"format": fmt})
