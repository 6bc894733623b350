"""Image documents of a knowledge base: files (with optional captions) and image queries.

An image is checked (bytes, then pixels from the header, then a full decode) and kept as a
small PNG thumbnail (``aifab.data.thumbnails``): that is what the KB stores, what a dual
encoder embeds and what search results show. A caption, when given, is the document's text
(BM25 finds it; it is shown).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
from pathlib import Path
from typing import Any

from aifab.core.errors import InvalidInputError
from aifab.data.image_text import decode_image_text
from aifab.data.sources.folders import IMAGE_EXTENSIONS
from aifab.data.thumbnails import MAX_SOURCE_PIXELS, make_thumbnail
from aifab.inference.multimodal import MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS

__all__ = [
    "CAPTION_FILES",
    "IMAGE_EXTENSIONS",
    "MAX_FILE_PIXELS",
    "image_url",
    "query_image",
    "read_captions",
]

#: Largest width x height of an image file a KB reads.
MAX_FILE_PIXELS = MAX_SOURCE_PIXELS
#: A folder's captions: ``file,caption`` (CSV with a header) or ``{"file", "caption"}`` lines.
CAPTION_FILES = ("captions.csv", "captions.jsonl")


def image_url(png: bytes) -> str:
    """``data:image/png;base64,...`` of a thumbnail (what the dual encoder and pages take)."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def image_digest(png: bytes) -> str:
    """Content digest of a thumbnail (part of its chunk id, so a changed image is re-embedded)."""
    return hashlib.sha256(png).hexdigest()[:16]


def query_image(
    value: str | bytes,
    *,
    max_bytes: int = MAX_IMAGE_BYTES,
    max_pixels: int = MAX_IMAGE_PIXELS,
    field: str = "image",
) -> bytes:
    """An image query (bytes, base64 or a ``data:image`` URL) -> its checked thumbnail.

    The size is checked before base64 decoding and the pixels before pixel decoding.

    Raises:
        InvalidInputError: over ``max_image_bytes`` or ``max_image_pixels`` (named), not base64,
            or not a readable image; the message starts with ``field``.
    """
    if isinstance(value, str):
        try:
            value = decode_image_text(value, max_bytes=max_bytes)
        except ValueError as exc:
            raise InvalidInputError(f"{field}: {exc}") from None
    if len(value) > max_bytes:
        raise InvalidInputError(
            f"{field}: {len(value)} bytes is over max_image_bytes ({max_bytes})"
        )
    try:
        png, _ = make_thumbnail(value, max_pixels=max_pixels)
    except ValueError as exc:
        raise InvalidInputError(f"{field}: {exc}") from None
    return png


def read_captions(root: Path) -> tuple[dict[str, str], str | None]:
    """A folder's captions by relative file path, and the caption file's name (or None).

    Raises:
        InvalidInputError: a caption file without ``file`` and ``caption`` (line named).
    """
    for name in CAPTION_FILES:
        path = root / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8-sig")
        if name.endswith(".csv"):
            rows = list(csv.DictReader(io.StringIO(text)))
            if rows and not {"file", "caption"} <= set(rows[0]):
                raise InvalidInputError(f"{path}: needs the columns file and caption")
        else:
            rows = []
            for n, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InvalidInputError(f"{path}: line {n}: {exc.msg}") from None
                if not isinstance(row, dict) or not {"file", "caption"} <= set(row):
                    raise InvalidInputError(f"{path}: line {n}: needs file and caption")
                rows.append(row)
        return {str(r["file"]).strip(): str(r["caption"] or "").strip() for r in rows}, name
    return {}, None


def image_document(data: bytes, doc_id: str, caption: str | None, source: str) -> Any:
    """An image file's :class:`~aifab.rag.documents.Document` (thumbnail, caption as text).

    Raises:
        ValueError: not a readable image, or over :data:`MAX_FILE_PIXELS` (named).
    """
    from aifab.rag.documents import Document

    png, info = make_thumbnail(data, max_pixels=MAX_FILE_PIXELS)
    meta: dict[str, Any] = {
        "source": source,
        "type": str(info["format"] or "image").lower(),
        "modality": "image",
        "width": info["width"],
        "height": info["height"],
    }
    return Document(doc_id, caption or "", meta, image=png)
