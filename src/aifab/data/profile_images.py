"""Image columns in a profile: sizes, modes and formats of a sample of a BLOB column's values.

Only headers are read (PIL opens lazily), so profiling a column of large images costs no
decoding; values that are not images are counted as ``unreadable``.
"""

from __future__ import annotations

import io
from collections import Counter
from typing import Any

import duckdb

from aifab.data.lake import sql_ident

__all__ = ["SAMPLE", "image_summary"]

#: Values per column whose headers are read.
SAMPLE = 500


def image_summary(con: duckdb.DuckDBPyConnection, rel: str, column: str) -> dict[str, Any] | None:
    """Sizes, modes and formats of up to :data:`SAMPLE` non-null values of a BLOB column.

    Returns:
        ``{"sampled", "unreadable", "width": [min, max], "height": [min, max], "modes",
        "formats"}``, or None when no sampled value is an image.
    """
    from PIL import Image

    col = sql_ident(column)
    rows = con.execute(f"SELECT {col} FROM {rel} WHERE {col} IS NOT NULL LIMIT {SAMPLE}").fetchall()
    widths, heights, modes, formats, bad = [], [], Counter[str](), Counter[str](), 0
    for (value,) in rows:
        try:
            with Image.open(io.BytesIO(bytes(value))) as im:
                widths.append(im.size[0])
                heights.append(im.size[1])
                modes[im.mode] += 1
                formats[str(im.format)] += 1
        except (OSError, ValueError, TypeError):
            bad += 1
    if not widths:
        return None
    return {
        "sampled": len(rows),
        "unreadable": bad,
        "width": [min(widths), max(widths)],
        "height": [min(heights), max(heights)],
        "modes": dict(modes.most_common()),
        "formats": dict(formats.most_common()),
    }
