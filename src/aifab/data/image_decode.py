"""The one way caller-supplied image bytes are opened: an allow-list of formats, pixels capped.

Only the formats the models need are opened (PNG, JPEG, WebP, GIF's first frame, BMP); a
container such as ICO, whose header may name 16x16 while it holds a 13,000 x 13,000 PNG, is
refused rather than trusted. The pixel cap is checked on the size reported by the plugin that
will decode, before any pixel is decoded. The decode functions are module-level so that the
worker pool (:mod:`aifab.core.workers`) can run them in a memory-capped process.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from PIL import Image

__all__ = [
    "ALLOWED_FORMATS",
    "ImageTooLarge",
    "IMAGE_TIMEOUT_S",
    "decode_pixels",
    "image_header",
    "open_checked",
    "thumbnail_png",
]

#: Formats opened at all; anything else is "not an allowed image format".
ALLOWED_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")
#: Wall-clock limit of one image's decode in the worker pool; its worker is killed after it.
IMAGE_TIMEOUT_S = 10.0


class ImageTooLarge(ValueError):
    """The header claims more pixels than allowed (or than Pillow's own bomb limit)."""


def open_checked(data: bytes, max_pixels: int | None) -> Image.Image:
    """Open ``data`` (the header only) with an allowed format's plugin, its pixels capped.

    Raises:
        ValueError: not an image, or a format outside :data:`ALLOWED_FORMATS` (named).
        ImageTooLarge: over ``max_pixels`` (the message names ``max_image_pixels``) or
            Pillow's own decompression-bomb limit.
    """
    from PIL import Image

    try:
        im = Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS)
    except Image.UnidentifiedImageError:  # its message names a BytesIO object, not the data
        found = _sniff(data)
        if found is not None:
            allowed = ", ".join(ALLOWED_FORMATS)
            raise ValueError(f"image format {found} is not allowed (allowed: {allowed})") from None
        raise ValueError("not a readable image (no known image format)") from None
    except Image.DecompressionBombError as exc:
        raise ImageTooLarge(f"image too large to decode ({exc})") from None
    except (OSError, SyntaxError) as exc:
        raise ValueError(f"not a readable image ({exc})") from None
    width, height = im.size
    if max_pixels is not None and width * height > max_pixels:
        im.close()
        raise ImageTooLarge(
            f"image of {width}x{height} pixels is over max_image_pixels ({max_pixels})"
        )
    return im


def _sniff(data: bytes) -> str | None:
    """The format whose magic bytes ``data`` starts with, for the refusal's message.

    Only each plugin's prefix test runs: opening an ICO already decodes its inner image.
    """
    from PIL import Image

    Image.init()
    prefix = data[:16]
    for name, (_, accept) in Image.OPEN.items():
        try:
            if accept is not None and accept(prefix):
                return name
        except Exception:  # noqa: BLE001, S112 - a plugin's test that fails is a "no"
            continue
    return None


def image_header(data: bytes, max_pixels: int | None = None) -> dict[str, Any]:
    """``{width, height, format, mode}`` of allowed image bytes, from the header alone.

    Raises:
        ValueError: as :func:`open_checked`.
    """
    with open_checked(data, max_pixels) as im:
        return {"width": im.size[0], "height": im.size[1], "format": im.format, "mode": im.mode}


def decode_pixels(
    data: bytes, size: int, channels: int, max_pixels: int | None
) -> tuple[np.ndarray, tuple[int, int]]:
    """Image bytes -> ``(channels, size, size)`` float32 in [0, 1], and its ``(width, height)``.

    The size is the image's own, what its work is priced by. The pixels are converted to L or
    RGB, resized to ``size`` x ``size`` and divided by 255.

    Raises:
        ValueError: as :func:`open_checked`, or a truncated or corrupt image.
    """
    import numpy as np

    mode = "L" if channels == 1 else "RGB"
    with open_checked(data, max_pixels) as im:
        width, height = im.size
        try:
            small = im.convert(mode).resize((size, size))
        except (OSError, SyntaxError) as exc:
            raise ValueError(f"not a readable image ({exc})") from None
    arr = np.asarray(small, dtype=np.float32) / 255.0
    out: np.ndarray = arr.reshape(size, size, channels).transpose(2, 0, 1)
    return out, (width, height)


def thumbnail_png(data: bytes, max_pixels: int, size: int) -> tuple[bytes, dict[str, Any]]:
    """Image bytes -> ``(PNG of at most size x size, {width, height, format, mode})``.

    Raises:
        ValueError: as :func:`open_checked`, or a truncated or corrupt image.
    """
    with open_checked(data, max_pixels) as im:
        info = {"width": im.size[0], "height": im.size[1], "format": im.format, "mode": im.mode}
        try:
            im.load()  # a truncated file fails here, not later
            small = im.convert("RGB")
        except (OSError, SyntaxError) as exc:
            raise ValueError(f"not a readable image ({exc})") from None
    small.thumbnail((size, size))
    buf = io.BytesIO()
    small.save(buf, format="PNG", optimize=True)
    return buf.getvalue(), info
