"""Images sent as text (base64, or a ``data:`` URL): sized before they are decoded.

Requests, request logs and knowledge-base queries all carry images this way; one decoder keeps
their checks and messages the same.
"""

from __future__ import annotations

import base64
import binascii

__all__ = ["decode_image_text", "encoded_size"]


def _payload(value: str) -> str:
    return value.split(",", 1)[1] if value.startswith("data:") else value


def encoded_size(value: str) -> int:
    """About how many bytes a base64 string or ``data:`` URL decodes to, without decoding it."""
    return len(_payload(value)) * 3 // 4


def decode_image_text(value: str, *, max_bytes: int | None = None) -> bytes:
    """The bytes of a base64 string or ``data:`` URL, refused before decoding when too large.

    Args:
        value: base64 text, optionally a ``data:image/...;base64,`` URL.
        max_bytes: the largest decoded size accepted (None: any).

    Raises:
        ValueError: ``~N bytes is over max_image_bytes (M)``, or ``not valid base64``.
    """
    size = encoded_size(value)
    if max_bytes is not None and size > max_bytes:
        raise ValueError(f"~{size} bytes is over max_image_bytes ({max_bytes})")
    try:
        return base64.b64decode(_payload(value), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not valid base64") from None
