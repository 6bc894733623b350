"""Excel workbooks (python-calamine) and Arrow IPC/Feather files, staged as Parquet.

Arrow files are scanned batch by batch by DuckDB; a sheet is read whole (workbooks are small
next to what CSV and Parquet carry), each column typed from its cells: one kind of value keeps
its type, ints with floats become floats, anything mixed becomes text.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import duckdb

from aifab.core.errors import InvalidInputError, first_line
from aifab.data import lake
from aifab.data.sources.options import IngestOptions
from aifab.data.sources.staged import Staged


def _column_type(values: list[Any]) -> Any:
    import pyarrow as pa

    kinds = {type(v) for v in values if v is not None and v != ""}
    if kinds <= {bool} and kinds:
        return pa.bool_()
    if kinds <= {int}:
        return pa.int64() if kinds else pa.string()
    if kinds <= {int, float}:
        # Excel keeps every number as a double: whole numbers come back as 1.0.
        whole = all(float(v).is_integer() for v in values if isinstance(v, int | float))
        return pa.int64() if whole else pa.float64()
    if kinds <= {datetime, date}:
        return pa.timestamp("us") if datetime in kinds else pa.date32()
    if kinds <= {time}:
        return pa.time64("us")
    if kinds <= {timedelta}:
        return pa.duration("us")
    return pa.string()


def _cell(value: Any, kind: Any) -> Any:
    import pyarrow as pa

    if value == "" or value is None:
        return None
    if kind == pa.string() and not isinstance(value, str):
        return str(value)
    if kind == pa.float64():
        return float(value)
    if kind == pa.int64():
        return int(value)
    return value


def _names(header: list[Any], width: int) -> list[str]:
    names: list[str] = []
    for i in range(width):
        raw = header[i] if i < len(header) else None
        name = str(raw).strip() if raw not in (None, "") else f"column{i}"
        while name in names:
            name += "_"
        names.append(name)
    return names


def _sheet_table(path: Path, opts: IngestOptions) -> Any:
    import pyarrow as pa
    from python_calamine import CalamineWorkbook

    try:
        book = CalamineWorkbook.from_path(str(path))
    except Exception as exc:  # noqa: BLE001 - calamine raises its own error types
        raise InvalidInputError(f"{path}: cannot read as xlsx: {first_line(exc)}") from None
    sheet = opts.sheet or book.sheet_names[0]
    if sheet not in book.sheet_names:
        raise InvalidInputError(
            f"{path}: no sheet {sheet!r} (sheets: {', '.join(book.sheet_names)})"
        )
    rows = book.get_sheet_by_name(sheet).to_python(skip_empty_area=True)
    if not rows:
        raise InvalidInputError(f"{path}: sheet {sheet!r} is empty")
    header, body = (rows[0], rows[1:]) if opts.header is not False else ([], rows)
    width = max(len(r) for r in rows)
    columns: dict[str, Any] = {}
    for i, name in enumerate(_names(header, width)):
        values = [r[i] if i < len(r) else None for r in body]
        kind = _column_type(values)
        columns[name] = pa.array([_cell(v, kind) for v in values], type=kind)
    return pa.table(columns), sheet


def stage_table(
    con: duckdb.DuckDBPyConnection, path: Path, fmt: str, opts: IngestOptions, dest: Path
) -> Staged:
    """Stage an ``xlsx`` sheet, an ``arrow`` (IPC file/stream, Feather) or ``orc`` file as Parquet.

    Raises:
        InvalidInputError: a file that is not a workbook or Arrow file, or a missing sheet.
    """
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    if fmt == "xlsx":
        table, sheet = _sheet_table(path, opts)
        pq.write_table(table, dest, compression="zstd")
        return Staged(dest, str(path), "file", {"format": fmt, "sheet": sheet})
    try:
        source = ds.dataset(path, format="orc" if fmt == "orc" else "ipc")
        con.register("__aifab_arrow", source)
        lake.copy_to_parquet(con, "SELECT * FROM __aifab_arrow", dest)
    except (pa.ArrowInvalid, OSError, duckdb.Error) as exc:
        raise InvalidInputError(f"{path}: cannot read as {fmt}: {first_line(exc)}") from None
    finally:
        con.unregister("__aifab_arrow")
    return Staged(dest, str(path), "file", {"format": fmt})
