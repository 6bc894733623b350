"""Thumbnails: an image (a lake cell of image bytes, or any bytes) as a small, checked PNG.

Every check comes before the work it saves: the stored size before the value is read, the
pixel count from the header before any pixel is decoded. What comes out is always a PNG made
here, never the stored bytes, so a cell that only claims to be an image is never served.
"""

from __future__ import annotations

from typing import Any

from aifab.core import workers
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data.image_decode import IMAGE_TIMEOUT_S, thumbnail_png

__all__ = [
    "MAX_SOURCE_BYTES",
    "MAX_SOURCE_PIXELS",
    "THUMBNAIL_PX",
    "cell_thumbnail",
    "make_thumbnail",
]

#: Longest side of a thumbnail, in pixels (a 128x128 PNG is at most ~50 KB).
THUMBNAIL_PX = 128
#: Largest stored image a thumbnail is made from.
MAX_SOURCE_BYTES = 20 << 20
#: Largest width x height decoded for a thumbnail (Pillow's own bomb limit is ~89M).
MAX_SOURCE_PIXELS = 40_000_000


def make_thumbnail(
    data: bytes, *, max_pixels: int = MAX_SOURCE_PIXELS, size: int = THUMBNAIL_PX
) -> tuple[bytes, dict[str, Any]]:
    """Image bytes -> ``(PNG of at most size x size, {width, height, format, mode})``.

    Raises:
        ValueError: not an image, a format outside the allow-list
            (:data:`~aifab.data.image_decode.ALLOWED_FORMATS`), truncated or corrupt, over
            ``max_pixels`` (the message names ``max_image_pixels``), or stopped by the worker
            pool's time or memory limit.
    """
    # In a memory-capped worker (killed at its time limit) when the server runs one.
    try:
        return workers.run(
            thumbnail_png, data, max_pixels, size, timeout_s=IMAGE_TIMEOUT_S, what="thumbnail"
        )
    except InvalidInputError as exc:
        raise ValueError(exc.message) from None


def cell_thumbnail(ref: str, column: str, row: int) -> bytes:
    """The PNG thumbnail of the image bytes in ``column`` at ``row`` (0-based) of a version.

    Raises:
        NotFoundError: unknown dataset or version, or no such row.
        InvalidInputError: no such column, not a column of bytes, an empty cell, a stored
            value over :data:`MAX_SOURCE_BYTES`, or bytes that are not an image (all named).
    """
    from aifab.data import lake
    from aifab.data.catalog import resolve

    v = resolve(ref)
    types = {c["name"]: str(c["type"]).upper() for c in v.schema}
    if column not in types:
        raise InvalidInputError(f"{v.ref} has no column {column!r}")
    if types[column] != "BLOB":
        raise InvalidInputError(f"{v.ref} column {column!r} holds {types[column]}, not images")
    if not 0 <= row < v.num_rows:
        raise NotFoundError(f"{v.ref} has no row {row} (it has {v.num_rows})")
    col, scan = lake.sql_ident(column), v.scan_sql()
    con = lake.connect()
    (size,) = con.sql(
        f"SELECT octet_length({col}) FROM {scan} LIMIT 1 OFFSET {int(row)}"
    ).fetchall()[0]
    where = f"{v.ref} row {row} column {column!r}"
    if size is None:
        raise InvalidInputError(f"{where}: empty (no image)")
    if size > MAX_SOURCE_BYTES:
        raise InvalidInputError(f"{where}: {size} bytes is over the limit of {MAX_SOURCE_BYTES}")
    (value,) = con.sql(f"SELECT {col} FROM {scan} LIMIT 1 OFFSET {int(row)}").fetchall()[0]
    try:
        png, _ = make_thumbnail(bytes(value))
    except ValueError as exc:
        raise InvalidInputError(f"{where}: {exc}") from None
    return png
