"""What a source hands back to ingest: a staged Parquet file, its origin and its rejects."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aifab.data.quarantine import QuarantineItem

if TYPE_CHECKING:
    import pyarrow as pa

#: Rows buffered before a Parquet row group is written (bounds memory for big folders/crawls).
_BATCH_ROWS = 1000


@dataclass
class Staged:
    """A source's output: ``path`` is a Parquet file in the workspace's ``tmp/``.

    ``rejects`` may be a lazy iterator (it is only consumed when the version is new), and
    ``rejected``/``rejected_lines`` summarize it without consuming it.
    """

    path: Path
    source: str
    source_kind: str
    details: dict[str, Any] = field(default_factory=dict)
    rejected: int = 0
    rejected_lines: tuple[int, ...] = ()
    rejects: Iterable[QuarantineItem] = ()


def write_rows(rows: Iterable[Mapping[str, Any]], schema: pa.Schema, dest: Path) -> int:
    """Write dict rows of a fixed schema to a Parquet file in batches; return the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    count = 0
    buffer: list[Mapping[str, Any]] = []
    with pq.ParquetWriter(dest, schema, compression="zstd") as writer:
        for row in rows:
            buffer.append(row)
            if len(buffer) >= _BATCH_ROWS:
                writer.write_table(pa.Table.from_pylist(buffer, schema=schema))
                count += len(buffer)
                buffer = []
        if buffer:
            writer.write_table(pa.Table.from_pylist(buffer, schema=schema))
            count += len(buffer)
    return count


def refuse_share(source: str, kept: int, rejected: int, min_share: float, why: str) -> None:
    """Raise when fewer than ``min_share`` of a file's rows were kept (nothing is committed).

    Raises:
        InvalidInputError: naming how many rows were kept and why the others were not.
    """
    from aifab.core.errors import InvalidInputError

    total = kept + rejected
    if total and kept and kept / total >= min_share:
        return
    raise InvalidInputError(
        f"{source}: kept {kept} of {total} rows (under --min-kept-share {min_share:g}), "
        f"nothing committed: {why}"
    )
