"""Image columns of tabular files (``image_columns``): each row's image checked at ingest.

A column holds file paths (relative ones are taken from the ingested file's folder and stored
absolute, so training finds them from any directory) or image bytes. A row whose image is
missing, truncated or not an image is quarantined with a reason naming the file (or row and
column), in the same ``image.unreadable`` rule and ``<file>: <why>`` form as image folders;
the other rows land. Only headers are read, plus a full check of truncation.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from aifab.core.errors import InvalidInputError
from aifab.data.quarantine import QuarantineItem
from aifab.data.sources.folders import check_complete
from aifab.data.sources.staged import Staged, refuse_share

__all__ = ["check_image_columns"]


def _problem(value: Any, base: Path | None, where: str) -> tuple[str | None, Any]:
    """``(reason, value to store)``; the reason is None when the image is readable.

    A path's reason names the file as written in the row; bytes' reason names ``where``.
    """
    from PIL import Image

    if isinstance(value, bytes | bytearray):
        source: Any = io.BytesIO(value)
    else:
        path = Path(str(value)).expanduser()
        if not path.is_absolute() and base is not None:
            path = base / path
        source, where, value = path, str(value), str(path)
    try:
        with Image.open(source) as im:
            check_complete(source, im)
    except FileNotFoundError:
        return f"{where}: no such file", value
    except Image.UnidentifiedImageError:
        return f"{where}: not an image (no known image format)", value
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        return f"{where}: {exc}", value
    return None, value


def _shown(record: dict[str, Any]) -> dict[str, Any]:
    """A record as the quarantine keeps it: bytes as their size, not their content."""
    return {
        k: f"<{len(v)} bytes>" if isinstance(v, bytes | bytearray) else v for k, v in record.items()
    }


def _checked(
    rows: Iterator[dict[str, Any]],
    columns: Sequence[str],
    base: Path | None,
    bad: list[QuarantineItem],
) -> Iterator[dict[str, Any]]:
    for n, row in enumerate(rows):
        reasons = []
        for column in columns:
            if row[column] is not None:
                reason, row[column] = _problem(row[column], base, f"row {n} column {column!r}")
                if reason is not None:
                    reasons.append(reason)
        if reasons:
            bad.append(QuarantineItem("image.unreadable", "; ".join(reasons), _shown(row)))
            continue
        yield row


def _image_type(kind: Any) -> bool:
    import pyarrow as pa

    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    )


def check_image_columns(
    staged: Staged, columns: Sequence[str], base: Path | None, min_share: float
) -> Staged:
    """``staged`` without the rows whose image is unreadable (quarantined, reasons named).

    Args:
        staged: a staged file.
        columns: the image columns.
        base: the folder relative paths are under (None: the working directory).
        min_share: fail when fewer than this share of the rows is kept.

    Raises:
        InvalidInputError: a column not in the file, or of another type than text or bytes;
            fewer than ``min_share`` of the rows kept (nothing is committed).
    """
    import pyarrow.parquet as pq

    from aifab.data.sources.staged import write_rows

    schema = pq.read_schema(staged.path)
    for column in columns:
        if column not in schema.names:
            raise InvalidInputError(
                f"image_columns: {column!r} is not a column ({', '.join(schema.names)})"
            )
        kind = schema.field(column).type
        if not _image_type(kind):
            raise InvalidInputError(
                f"image_columns: {column!r} holds {kind}, not file paths or image bytes"
            )
    bad: list[QuarantineItem] = []
    checked = staged.path.with_name(staged.path.name + ".images")
    rows = (r for batch in pq.ParquetFile(staged.path).iter_batches() for r in batch.to_pylist())
    try:
        kept = write_rows(_checked(rows, columns, base, bad), schema, checked)
        checked.replace(staged.path)
    finally:
        checked.unlink(missing_ok=True)
    if bad:
        refuse_share(staged.source, kept, len(bad), min_share, bad[0].reason)
    details = {**staged.details, "image_columns": list(columns), "unreadable_images": len(bad)}
    return replace(
        staged,
        details=details,
        rejected=staged.rejected + len(bad),
        rejects=itertools.chain(staged.rejects, bad),
    )
