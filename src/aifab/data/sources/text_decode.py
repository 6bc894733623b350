"""Text encodings of ingested files: BOMs, HTML charset declarations, binary content, transcoding.

A file is decoded strictly: bytes that do not decode are reported (with their offset), never
turned into U+FFFD replacement characters.
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path

from aifab.core.errors import InvalidInputError

#: Bytes looked at to detect a BOM, binary content or an HTML charset.
HEAD_BYTES = 65536
_CHUNK = 1 << 20
#: Longest-first, so a UTF-32 BOM is not taken for a UTF-16 one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
#: Control bytes that never occur in text (tab, newlines, form feed and ESC are allowed).
_CONTROL = frozenset(range(32)) - {9, 10, 12, 13, 27}


class UndecodableError(ValueError):
    """A file's bytes are not text in the encoding it was read with."""


def bom_encoding(head: bytes) -> str | None:
    """The encoding a byte-order mark at the start of ``head`` announces, or ``None``."""
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name
    return None


def utf16_without_bom(head: bytes) -> str | None:
    """``utf-16-le``/``utf-16-be`` when ``head`` is mostly ASCII in UTF-16 without a BOM.

    Such text has a zero byte in every other position (after each character in
    little-endian, before it in big-endian) and none in the others.
    """
    even, odd = head[0:4096:2], head[1:4096:2]
    if len(odd) < 2:
        return None
    zeros_even, zeros_odd = even.count(0) / len(even), odd.count(0) / len(odd)
    if zeros_odd > 0.7 and zeros_even < 0.05:
        return "utf-16-le"
    if zeros_even > 0.7 and zeros_odd < 0.05:
        return "utf-16-be"
    return None


def detected(head: bytes) -> str | None:
    """The encoding the bytes themselves show: a BOM's, or UTF-16 without one."""
    return bom_encoding(head) or utf16_without_bom(head)


def html_charset(head: bytes) -> str | None:
    """The charset an HTML ``<meta charset>``/``http-equiv`` declaration names, or ``None``."""
    found = _CHARSET.search(head)
    if found is None:
        return None
    name = found.group(1).decode("ascii", "replace")
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def binary_offset(head: bytes) -> int | None:
    """Offset of the first byte that marks ``head`` as binary rather than text, or ``None``."""
    for i, byte in enumerate(head):
        if byte in _CONTROL:
            return i
    return None


def check_encoding(name: str) -> str:
    """The codec's canonical name; :class:`InvalidInputError` for an unknown encoding."""
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise InvalidInputError(
            f"unknown encoding {name!r} (e.g. utf-8, utf-16, latin-1, cp1252)"
        ) from None


def _where(exc: UnicodeDecodeError, base: int) -> str:
    bad = exc.object[exc.start : exc.start + 4]
    return f"byte {base + exc.start} ({bad.hex(' ')})"


def decode(raw: bytes, encoding: str | None, *, html: bool = False) -> tuple[str, str]:
    """Decode a whole document strictly; return ``(text, encoding used)``.

    The encoding is a BOM's (or UTF-16 without a BOM), else an HTML charset declaration's
    (``html=True``), else UTF-8 when the bytes are valid UTF-8 text, else ``encoding``: a
    given encoding is the fallback for the files that say nothing and are not UTF-8, so one
    folder may mix encodings.

    Raises:
        UndecodableError: binary content, or bytes that are not valid in that encoding.
    """
    enc = detected(raw[:HEAD_BYTES]) or (html_charset(raw[:HEAD_BYTES]) if html else None)
    if enc is None and encoding not in (None, "utf-8"):
        try:
            raw.decode("utf-8")
            # NUL bytes are valid UTF-8, but such "text" is in the given encoding.
            enc = "utf-8" if binary_offset(raw[:HEAD_BYTES]) is None else encoding
        except UnicodeDecodeError:
            enc = encoding
    enc = enc or "utf-8"
    if enc in ("utf-8", "utf-8-sig"):
        at = binary_offset(raw[:HEAD_BYTES])
        if at is not None:
            raise UndecodableError(f"not text: binary byte 0x{raw[at]:02x} at byte {at}")
    try:
        return raw.decode(enc), enc
    except UnicodeDecodeError as exc:
        raise UndecodableError(
            f"not valid {enc} at {_where(exc, 0)}; pass --encoding with the file's encoding"
        ) from None


def transcode(src: Path, dest: Path, encoding: str) -> None:
    """Rewrite ``src`` (in ``encoding``) as UTF-8 into ``dest``, streaming in 1 MB chunks.

    A ``.gz`` file is decompressed on the way.

    Raises:
        InvalidInputError: bytes that are not valid in ``encoding``, naming their offset.
    """
    decoder = codecs.getincrementaldecoder(encoding)()
    done = 0
    import gzip

    gz = src.suffix.lower() == ".gz"
    with (
        gzip.open(src, "rb") if gz else src.open("rb") as fin,
        dest.open("w", encoding="utf-8", newline="") as fout,
    ):
        while True:
            chunk = fin.read(_CHUNK)
            try:
                fout.write(decoder.decode(chunk, final=not chunk))
            except UnicodeDecodeError as exc:
                raise InvalidInputError(
                    f"{src}: not valid {encoding} at {_where(exc, done)}; "
                    "pass --encoding with the file's encoding"
                ) from None
            if not chunk:
                return
            done += len(chunk)
