"""Pure per-block work of the Ray engine: DuckDB over one Arrow block, and block summaries.

Nothing here imports Ray: Ray workers call these functions on each block (a row group of
the input version), so they are also testable alone. Each block query runs on its own
sandboxed in-memory DuckDB connection that can read nothing but the block it is given.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: The table name block queries read (the SQL builders of ``clean_steps`` take it as source).
BLOCK = "__aifab_block"
BLOCK_SQL = f"SELECT * FROM {BLOCK}"
NFKC_UDF = "aifab_nfkc"


def _nfkc(values: pa.Array) -> pa.Array:
    return pc.utf8_normalize(values, "NFKC")


def block_connection(udfs: Sequence[str] = ()) -> duckdb.DuckDBPyConnection:
    """A one-thread DuckDB connection with no file or extension access.

    Ray runs the blocks in parallel; user SQL such as filters must not reach the worker's disk.
    """
    from duckdb.func import PythonUDFType

    from aifab.data.pii import CARD_UDF, register_functions

    con = duckdb.connect()
    con.execute("SET threads=1")
    con.execute("SET enable_progress_bar_print=false")
    for name in udfs:
        if name == CARD_UDF:
            register_functions(con)
        elif name == NFKC_UDF:
            con.create_function(
                name, _nfkc, ["VARCHAR"], "VARCHAR", type=PythonUDFType.ARROW, side_effects=False
            )
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def run_sql(block: pa.Table, sql: str, udfs: Sequence[str] = ()) -> pa.Table:
    """The rows of ``sql`` (written over :data:`BLOCK`) on one block."""
    con = block_connection(udfs)
    try:
        con.register(BLOCK, block)
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def run_sql_with(block: pa.Table, sql: str, tables: dict[str, pa.Table]) -> pa.Table:
    """:func:`run_sql` with the driver's small ``tables`` (name -> table) readable too."""
    con = block_connection()
    try:
        con.register(BLOCK, block)
        for name, table in tables.items():
            con.register(name, table)
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()


def describe(schema: pa.Schema, sql: str, udfs: Sequence[str] = ()) -> dict[str, str]:
    """Column name -> DuckDB type of ``sql`` over a block of ``schema`` (planning only)."""
    con = block_connection(udfs)
    try:
        con.register(BLOCK, schema.empty_table())
        rows = con.execute(f"DESCRIBE SELECT * FROM ({sql}) AS t").fetchall()
    finally:
        con.close()
    return {name: col_type for name, col_type, *_ in rows}


@contextmanager
def open_object(path: str, store: str | None) -> Iterator[Any]:
    """A lake object for pyarrow: ``path`` on this machine, or on the store at URI ``store``.

    On a store only the byte ranges pyarrow asks for are read (the footer, one row group).
    """
    if store is None:
        yield path
        return
    from aifab.core.storage import store_at

    with store_at(store).fs.open(path, "rb") as fh:
        yield fh


def read_block(task: dict[str, Any], rn: str | None) -> pa.Table:
    """The rows of one read task (see :func:`read_tasks`), read where the task says.

    With ``rn``, each row's 1-based position in the version is added as that column.
    """
    with open_object(task["path"], task.get("store")) as src:
        table = pq.ParquetFile(src).read_row_group(task["index"])
    table = table.slice(task["start"], task["length"])
    if rn is not None:
        first = task["offset"] + 1
        positions = np.arange(first, first + table.num_rows, dtype=np.int64)
        table = table.append_column(rn, pa.array(positions))
    return table


def read_tasks(
    files: Sequence[str | Path], block_rows: int, store: str | None = None
) -> list[dict[str, Any]]:
    """One read task per block of at most ``block_rows`` rows of ``files``.

    In version order, never across row groups, each with the number of rows before it.
    ``files`` are paths on ``store`` (a storage URI) when one is given, else on this machine;
    each task names both, so the worker that runs it reads its rows from where they are.
    """
    tasks: list[dict[str, Any]] = []
    offset = 0
    for f in map(str, files):
        with open_object(f, store) as src:
            meta = pq.read_metadata(src)
        for i in range(meta.num_row_groups):
            rows = meta.row_group(i).num_rows
            for start in range(0, rows, block_rows):
                length = min(block_rows, rows - start)
                task = {"path": f, "index": i, "start": start, "length": length}
                tasks.append({**task, "offset": offset, "store": store})
                offset += length
    return tasks


def numeric_values(block: pa.Table, column: str) -> np.ndarray:
    """The non-null values of a numeric column as float64 (NaN kept: DuckDB sorts it last)."""
    col = block.column(column)
    col = pc.drop_null(col)
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)


def bin_of(values: np.ndarray, lo: float, hi: float, bins: int) -> np.ndarray:
    """Bin index in ``[0, bins)`` of each value of ``[lo, hi]`` (the same on every block)."""
    if hi <= lo:
        return np.zeros(len(values), dtype=np.int64)
    idx = np.floor((values - lo) / (hi - lo) * bins).astype(np.int64)
    return np.clip(idx, 0, bins - 1)


def in_path(values: np.ndarray, path: Sequence[tuple[float, float, int, int]]) -> np.ndarray:
    """Mask of the values inside a refinement path.

    At each level ``(lo, hi, bins, b)`` the value lies in ``[lo, hi]`` and falls in bin ``b``.
    """
    mask = np.ones(len(values), dtype=bool)
    for lo, hi, bins, b in path:
        inside = (values >= lo) & (values <= hi)
        mask &= inside
        mask[inside] &= bin_of(values[inside], lo, hi, bins) == b
    return mask


def non_null(block: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``columns`` of the rows whose first column is not null."""
    block = block.select(list(columns))
    return block.filter(pc.is_valid(block.column(0)))


def drop_positions(block: pa.Table, column: str, positions: pa.Array) -> pa.Table:
    """The rows of ``block`` whose ``column`` (the row number) is not in ``positions``."""
    return block.filter(pc.invert(pc.is_in(block.column(column), value_set=positions)))
