"""Image drift: simple statistics per image and a pixel embedding, for the drift report.

An image column (bytes from the lake, or base64 strings as request logs keep them) becomes
numbers per image (width, height, brightness, contrast, colourfulness), which the report then
tests like numerical columns as ``<column>.<stat>``, and a small embedding (the image shrunk
to 8x8 grey, unit length) tested like an embedding column as ``<column>.pixels``. No model is
loaded: the statistics see what changed in the pictures themselves.

Brightness, contrast and colourfulness are computed on a thumbnail (longest side
:data:`~aifab.inference.log_records.THUMB_SIDE`) of every image, because that is what the
request log keeps of a large one: a logged thumbnail and its full-size original then give
the same numbers, and width and height come from the original's recorded size.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np

from aifab.data.image_text import decode_image_text
from aifab.inference.log_records import THUMB_SIDE

__all__ = ["STATS", "image_features"]

#: Numbers per image the report compares.
STATS = ("width", "height", "brightness", "contrast", "colourfulness")
_THUMB = 8


def _bytes(value: Any) -> bytes | None:
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str) and value:
        try:
            return decode_image_text(value)
        except ValueError:
            return None
    return None


def _image(value: Any) -> tuple[bytes | None, tuple[int, int] | None]:
    """An image's bytes, and its real size when the value is a request log's thumbnail."""
    if isinstance(value, dict) and "thumbnail" in value:
        try:
            size = (int(value["width"]), int(value["height"]))
        except (KeyError, TypeError, ValueError):
            return None, None
        return _bytes(value["thumbnail"]), size
    return _bytes(value), None


def image_features(
    values: Sequence[Any], limit: int, seed: int
) -> tuple[dict[str, np.ndarray], np.ndarray, int, int]:
    """Statistics and pixel embeddings of up to ``limit`` images sampled from ``values``.

    Returns:
        ``(stats by name, (n, 64) embeddings, missing, unreadable)``; missing counts NULLs,
        unreadable counts values that are not a decodable image.
    """
    from PIL import Image

    present = [v for v in values if v is not None]
    missing = len(values) - len(present)
    if len(present) > limit:
        pick = np.sort(np.random.default_rng(seed).choice(len(present), limit, replace=False))
        present = [present[i] for i in pick]
    rows: list[list[float]] = []
    vecs: list[np.ndarray] = []
    bad = 0
    for value in present:
        data, size = _image(value)
        try:
            if data is None:
                raise ValueError("not image bytes")
            with Image.open(io.BytesIO(data)) as im:
                width, height = size or im.size
                small = im.convert("RGB")
                small.thumbnail((THUMB_SIDE, THUMB_SIDE))
                rgb = np.asarray(small, dtype=np.float32) / 255.0
                thumb = np.asarray(small.convert("L").resize((_THUMB, _THUMB)), dtype=np.float32)
        except (OSError, ValueError):
            bad += 1
            continue
        grey = rgb.mean(axis=2)
        colour = float(np.abs(rgb - grey[..., None]).mean())
        rows.append([width, height, float(grey.mean()), float(grey.std()), colour])
        v = thumb.ravel() - thumb.mean()
        vecs.append(v / max(float(np.linalg.norm(v)), 1e-6))
    table = np.asarray(rows, dtype=np.float64).reshape(-1, len(STATS))
    stats = {name: table[:, i] for i, name in enumerate(STATS)}
    embeddings = np.asarray(vecs, dtype=np.float32).reshape(-1, _THUMB * _THUMB)
    return stats, embeddings, missing, bad
