"""Logged input records that fit a request-log field, images included.

A request-log field holds at most :data:`~aifab.inference.request_log.MAX_FIELD_BYTES` of JSON,
and one client photo in base64 is often more. Dropping the whole input would blind the monitor
exactly where images are involved, so an input that does not fit is reduced instead: each
large image becomes a small PNG thumbnail that keeps its real width and height, then as many
whole records as fit are kept (their count is noted). The drift report computes its image
statistics on thumbnails of this size for reference and logged images alike, so a thumbnail
compares with the original it stands for.

This runs in the request log's writer thread, never on the request path.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from aifab.data.image_text import decode_image_text

__all__ = ["THUMB_SIDE", "fit_records", "image_bytes", "thumbnail_of"]

#: Longest side of a logged thumbnail (and of the image the drift statistics are computed on).
THUMB_SIDE = 32
#: Image strings longer than this are logged as thumbnails.
IMAGE_LOG_CHARS = 4 * 1024
#: Images with more pixels than this (read from the header) are not decoded for the log.
MAX_LOG_PIXELS = 4096 * 4096
#: Leading bytes of the image formats clients send.
_MAGIC = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"RIFF", b"BM")


def image_bytes(value: str) -> bytes | None:
    """The bytes of a base64 or ``data:`` URL string when they start like an image, else None."""
    try:
        data = decode_image_text(value)
    except ValueError:
        return None
    return data if data.startswith(_MAGIC) else None


def thumbnail_of(data: bytes) -> dict[str, Any] | None:
    """``{"thumbnail": base64 PNG, "width", "height", "bytes"}`` of an image, or None.

    None when the bytes are not a readable image or are larger than :data:`MAX_LOG_PIXELS`
    (:func:`~aifab.data.thumbnails.make_thumbnail` reads the header first: a decompression
    bomb is never decoded here).
    """
    from aifab.data.thumbnails import make_thumbnail

    try:
        png, info = make_thumbnail(data, max_pixels=MAX_LOG_PIXELS, size=THUMB_SIDE)
    except ValueError:
        return None
    return {
        "thumbnail": base64.b64encode(png).decode(),
        "width": info["width"],
        "height": info["height"],
        "bytes": len(data),
    }


def _shrunk(record: Any) -> Any:
    if not isinstance(record, dict):
        return record
    out: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, str) and len(value) > IMAGE_LOG_CHARS:
            data = image_bytes(value)
            small = thumbnail_of(data) if data is not None else None
            # Not an image, or unreadable: a size note (the drift report counts it unreadable).
            value = small or {"truncated": True, "chars": len(value)}
        out[key] = value
    return out


def fit_records(field: dict[str, Any], budget: int) -> dict[str, Any] | None:
    """``field`` (``{"records": [...], ...}``) reduced to at most ``budget`` bytes of JSON.

    Returns:
        The field with large images as thumbnails and the records that fit (in order), plus
        ``records_dropped``; None when it has no records list or not even one record fits.
    """
    records = field.get("records")
    if not isinstance(records, list):
        return None
    rest = {k: v for k, v in field.items() if k != "records"}
    size = len(json.dumps({**rest, "records": [], "records_dropped": len(records)}, default=str))
    kept: list[Any] = []
    for record in records:
        small = _shrunk(record)
        cost = len(json.dumps(small, default=str)) + 2  # its comma and space
        if size + cost > budget:
            break
        kept.append(small)
        size += cost
    if not kept:
        return None
    return {**rest, "records": kept, "records_dropped": len(records) - len(kept)}
