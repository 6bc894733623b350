"""Image columns in a profile: sizes, modes and formats of a sample of a BLOB column's values.

Only headers are read, and only of the allowed formats (:mod:`aifab.data.image_decode`): an
ICO, whose "header" read decodes its inner image, counts as ``unreadable`` with every value
that is not an image, so profiling a column of large images costs no decoding.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import duckdb

from aifab.data.image_decode import image_header
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
    col = sql_ident(column)
    rows = con.execute(f"SELECT {col} FROM {rel} WHERE {col} IS NOT NULL LIMIT {SAMPLE}").fetchall()
    widths, heights, modes, formats, bad = [], [], Counter[str](), Counter[str](), 0
    for (value,) in rows:
        try:
            head = image_header(bytes(value))
        except (ValueError, TypeError):
            bad += 1
            continue
        widths.append(head["width"])
        heights.append(head["height"])
        modes[str(head["mode"])] += 1
        formats[str(head["format"])] += 1
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
