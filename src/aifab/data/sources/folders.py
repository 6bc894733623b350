"""Documents (text, markdown, html, pdf: one row each; a folder or one file) and image folders.

Files are visited in sorted order (hidden ones skipped), so the same folder always gives the
same rows and re-ingesting it unchanged returns the existing version.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data.quarantine import QuarantineItem
from aifab.data.sources.html_text import extract
from aifab.data.sources.staged import Staged, write_rows
from aifab.data.sources.text_decode import UndecodableError, check_encoding, decode

DOC_EXTENSIONS = frozenset({".txt", ".text", ".md", ".markdown", ".rst", ".html", ".htm", ".pdf"})
IMAGE_EXTENSIONS = frozenset(
    {
        ".png",
        ".jpg",
        ".jpeg",
        ".gif",
        ".bmp",
        ".webp",
        ".tif",
        ".tiff",
    }
)
FolderKind = Literal["docs", "images"]
#: How many skipped file names the ingest details list (all are counted).
_SHOWN_SKIPPED = 20


def files_under(root: Path) -> Iterator[Path]:
    """Every non-hidden file below ``root``, in a stable sorted order."""
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if not name.startswith("."):
                yield Path(folder) / name


def _check_folder(root: Path) -> None:
    if not root.is_dir():
        raise NotFoundError(f"{root}: no such folder")


def folder_kind(root: Path) -> FolderKind:
    """Whether ``root`` holds documents or images (whichever is more numerous)."""
    _check_folder(root)
    docs = images = 0
    for path in files_under(root):
        suffix = path.suffix.lower()
        docs += suffix in DOC_EXTENSIONS
        images += suffix in IMAGE_EXTENSIONS
    if docs == images == 0:
        raise InvalidInputError(
            f"{root}: no text, markdown, html or image files in the folder "
            f"(looked for {', '.join(sorted(DOC_EXTENSIONS | IMAGE_EXTENSIONS))})"
        )
    return "images" if images > docs else "docs"


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def _doc_row(path: Path, encoding: str | None) -> dict[str, Any]:
    """One document's row; :class:`UndecodableError` when its bytes are not text."""
    raw = path.read_bytes()
    html = path.suffix.lower() in (".html", ".htm")
    if path.suffix.lower() == ".pdf":
        from aifab.data.sources.pdf_text import pdf_text

        try:
            text = pdf_text(raw)
        except ValueError as exc:
            raise UndecodableError(str(exc)) from None
    else:
        text, _ = decode(raw, encoding, html=html)
    title = None
    if html:
        page = extract(text)
        title, text = page.title, page.text
    return {
        "path": str(path),
        "title": title,
        "text": text,
        "bytes": len(raw),
        "modified": _mtime(path),
    }


def _doc_rows(
    root: Path, paths: list[Path], encoding: str | None, bad: list[QuarantineItem]
) -> Iterator[dict[str, Any]]:
    for path in paths:
        try:
            yield _doc_row(path, encoding)
        except UndecodableError as exc:
            rel = path.relative_to(root)
            bad.append(
                QuarantineItem("doc.undecodable", f"{rel}: {exc}", record={"path": str(path)})
            )


def _skipped(root: Path, read: list[Path]) -> dict[str, Any]:
    """How many files of the folder were not read (other extensions, hidden), and which."""
    taken = set(read)
    names = sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p not in taken and p.is_file()
    )
    return {"skipped": len(names), "skipped_files": names[:_SHOWN_SKIPPED]} if names else {}


def _doc_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("path", pa.string()),
            ("title", pa.string()),
            ("text", pa.string()),
            ("bytes", pa.int64()),
            ("modified", pa.timestamp("us", tz="UTC")),
        ]
    )


def stage_documents(root: Path, dest: Path, encoding: str | None = None) -> Staged:
    """One row per text/markdown/html/pdf file: path, title (html), text, bytes, modified.

    ``root`` is a folder or a single document. Each file is decoded strictly (its BOM, its
    HTML charset, UTF-8, else ``encoding``); one that does not decode is quarantined with the
    reason instead of stored as garbage.
    """
    if root.is_file():
        return _stage_document(root.resolve(), dest, encoding)
    _check_folder(root)
    root = root.resolve()
    paths = [p for p in files_under(root) if p.suffix.lower() in DOC_EXTENSIONS]
    if not paths:
        raise InvalidInputError(f"{root}: no text, markdown or html files in the folder")
    bad: list[QuarantineItem] = []
    encoding = check_encoding(encoding) if encoding else None
    rows = write_rows(_doc_rows(root, paths, encoding, bad), _doc_schema(), dest)
    if rows == 0:
        raise InvalidInputError(
            f"{root}: none of the {len(paths)} documents decodes as text ({bad[0].reason}); "
            "pass --encoding"
        )
    details = {"files": rows, **_skipped(root, paths)}
    return Staged(dest, str(root), "docs", details, rejected=len(bad), rejects=bad)


def _stage_document(path: Path, dest: Path, encoding: str | None) -> Staged:
    """The one-row table of a single document; one that does not decode is refused."""
    if path.suffix.lower() not in DOC_EXTENSIONS:
        raise InvalidInputError(
            f"{path}: not a document ({', '.join(sorted(DOC_EXTENSIONS))}); pass --format"
        )
    try:
        row = _doc_row(path, check_encoding(encoding) if encoding else None)
    except UndecodableError as exc:
        raise InvalidInputError(f"{path}: {exc}") from None
    write_rows(iter([row]), _doc_schema(), dest)
    return Staged(dest, str(path), "docs", {"files": 1})


def _image_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("path", pa.string()),
            ("label", pa.string()),
            ("width", pa.int32()),
            ("height", pa.int32()),
            ("format", pa.string()),
            ("mode", pa.string()),
            ("bytes", pa.int64()),
        ]
    )


def check_complete(source: Path | io.BytesIO, im: Any) -> None:
    """Raise ``OSError`` for a truncated image (the header alone does not show it).

    A JPEG must end in its EOI marker and a PNG must pass ``verify`` (chunk CRCs, IEND);
    otherwise the pixels are decoded, which fails on a truncated file. ``source`` is the file
    or the bytes ``im`` was opened from.
    """
    if im.format == "PNG":
        im.verify()
        return
    if im.format == "JPEG":
        if isinstance(source, io.BytesIO):
            tail = source.getvalue()[-64:]
        else:
            with source.open("rb") as fh:
                fh.seek(max(0, source.stat().st_size - 64))
                tail = fh.read()
        if b"\xff\xd9" in tail:
            return
    im.load()


def _image_rows(root: Path, paths: list[Path], bad: list[QuarantineItem]) -> Iterator[dict]:
    from PIL import Image

    for path in paths:
        rel = path.relative_to(root)
        try:
            # Image.open reads only the header: size and format without decoding pixels.
            with Image.open(path) as im:
                width, height, fmt, mode = im.width, im.height, im.format, im.mode
                check_complete(path, im)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
            bad.append(
                QuarantineItem("image.unreadable", f"{rel}: {exc}", record={"path": str(path)})
            )
            continue
        yield {
            "path": str(path),
            "label": rel.parts[0] if len(rel.parts) > 1 else None,
            "width": width,
            "height": height,
            "format": fmt,
            "mode": mode,
            "bytes": path.stat().st_size,
        }


def stage_images(root: Path, dest: Path) -> Staged:
    """One row per image: path, label (first sub-folder under ``root``), size, format, mode.

    Files that Pillow cannot identify go to the quarantine instead of failing the ingest.
    """
    _check_folder(root)
    root = root.resolve()
    paths = [p for p in files_under(root) if p.suffix.lower() in IMAGE_EXTENSIONS]
    if not paths:
        raise InvalidInputError(f"{root}: no image files in the folder")
    bad: list[QuarantineItem] = []
    rows = write_rows(_image_rows(root, paths, bad), _image_schema(), dest)
    if rows == 0:
        raise InvalidInputError(f"{root}: none of the {len(paths)} image files could be read")
    details = {"files": rows, **_skipped(root, paths)}
    return Staged(dest, str(root), "images", details, rejected=len(bad), rejects=bad)


def stage_image_file(path: Path, dest: Path) -> Staged:
    """The one-row image table of a single image file; one Pillow cannot read is refused."""
    path = path.resolve()
    bad: list[QuarantineItem] = []
    rows = write_rows(_image_rows(path.parent, [path], bad), _image_schema(), dest)
    if rows == 0:
        raise InvalidInputError(f"{path}: not a readable image ({bad[0].reason})")
    return Staged(dest, str(path), "images", {"files": 1})
