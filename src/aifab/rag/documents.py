"""Documents in: files (txt, md, html, pdf), folders, and text columns of dataset versions.

A document that cannot be read is quarantined with its reason; the rest go on.
"""

from __future__ import annotations

import html.parser
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data.sources.pdf_text import pdf_text

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "SUFFIXES",
    "Document",
    "Loaded",
    "load_dataset",
    "load_path",
    "load_texts",
    "parse_bytes",
]

#: A file larger than this is quarantined, not read.
MAX_DOCUMENT_BYTES = 50 << 20
SUFFIXES = (".txt", ".md", ".markdown", ".html", ".htm", ".pdf")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class Document:
    """One document's text, its stable id and metadata (source, type, dataset columns).

    An image document has its PNG thumbnail in ``image`` and its caption (maybe "") as text.
    """

    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    image: bytes | None = None


@dataclass
class Loaded:
    """What a source gave: documents, quarantined ``{"document", "reason"}``, lineage."""

    documents: list[Document] = field(default_factory=list)
    quarantine: list[dict[str, str]] = field(default_factory=list)
    sources: list[dict[str, Any]] = field(default_factory=list)


class _HTMLText(html.parser.HTMLParser):
    """Visible text of an HTML page; headings become markdown headings for the chunker."""

    _SKIP = {"script", "style", "noscript", "template", "head"}
    _BLOCK = {"p", "div", "li", "br", "tr", "section", "article", "pre", "blockquote", "table"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skip += 1
        elif re.fullmatch(r"h[1-6]", tag):
            self.parts.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skip = max(0, self._skip - 1)
        elif re.fullmatch(r"h[1-6]", tag) or tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def _decode(data: bytes) -> str:
    """UTF-8 (with or without BOM), UTF-16 with a BOM, else Windows-1252; junk is refused."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = data.decode("utf-16")
    elif b"\x00" in data[:65536]:
        raise ValueError("binary content, not text")
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            try:
                text = data.decode("cp1252")
            except UnicodeDecodeError:
                raise ValueError("undecodable text (not UTF-8, UTF-16 or Windows-1252)") from None
    sample = text[:65536]
    if sample and len(_CONTROL.findall(sample)) > 0.01 * len(sample):
        raise ValueError("binary content, not text")
    return text


def parse_bytes(data: bytes, suffix: str) -> str:
    """A file's text from its bytes and suffix (pure).

    Raises:
        ValueError: unsupported type, broken PDF, binary junk, undecodable or empty text.
    """
    suffix = suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"unsupported file type {suffix or '(none)'!r} ({', '.join(SUFFIXES)})")
    if suffix == ".pdf":
        text = pdf_text(data)
    elif suffix in (".html", ".htm"):
        parser = _HTMLText()
        parser.feed(_decode(data))
        parser.close()
        text = re.sub(r"\n{3,}", "\n\n", "".join(parser.parts))
    else:
        text = _decode(data)
    if not text.strip():
        raise ValueError("empty document (no text)")
    return text


def _files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not any(part.startswith(".") for part in rel.parts):
            yield path


def load_path(path: str | Path) -> Loaded:
    """Every document in a file or folder (hidden files skipped); failures quarantined.

    Image files (png, jpg, ...) become image documents, captioned by the folder's
    ``captions.csv`` or ``captions.jsonl`` when it has one.

    Raises:
        NotFoundError: ``path`` does not exist.
        InvalidInputError: a malformed caption file (line named).
    """
    from aifab.core.ids import file_digest
    from aifab.rag.images import IMAGE_EXTENSIONS, image_document, read_captions

    root = Path(path).expanduser()
    if not root.exists():
        raise NotFoundError(f"{path}: no such file or folder")
    out = Loaded()
    base = root.parent if root.is_file() else root
    captions, caption_file = read_captions(root) if root.is_dir() else ({}, None)
    for file in _files(root):
        doc_id = file.relative_to(base).as_posix()
        if doc_id == caption_file:
            continue
        try:
            size = file.stat().st_size
            if size > MAX_DOCUMENT_BYTES:
                raise ValueError(f"{size} bytes is over the limit of {MAX_DOCUMENT_BYTES}")
            if file.suffix.lower() in IMAGE_EXTENSIONS:
                doc = image_document(file.read_bytes(), doc_id, captions.pop(doc_id, ""), doc_id)
            else:
                text = parse_bytes(file.read_bytes(), file.suffix)
                doc = Document(doc_id, text, {"source": doc_id, "type": file.suffix.lower()[1:]})
        except (ValueError, OSError) as exc:
            out.quarantine.append({"document": doc_id, "reason": str(exc)})
            continue
        out.documents.append(doc)
        out.sources.append({"kind": "file", "ref": doc_id, "digest": file_digest(file)})
    for name in captions:  # a caption whose image is not there is reported, not dropped
        reason = f"{caption_file} captions {name!r}, which is not an image in the folder"
        out.quarantine.append({"document": name, "reason": reason})
    return out


def load_dataset(
    ref: str,
    text_column: str | None,
    id_column: str | None = None,
    image_column: str | None = None,
) -> Loaded:
    """Documents from a text column of a dataset version; other scalar columns are metadata.

    With ``image_column`` (a column of image bytes), each row is an image document captioned
    by ``text_column`` when given; a row whose image is unreadable is quarantined.

    Raises:
        NotFoundError: unknown dataset.
        InvalidInputError: a missing column (named), neither column given, or an image
            column that does not hold bytes.
    """
    from aifab.data import head, resolve

    version = resolve(ref)
    if text_column is None and image_column is None:
        raise InvalidInputError("a dataset source needs --text-column or --image-column")
    for column in (text_column, id_column, image_column):
        if column is not None and column not in version.columns:
            raise InvalidInputError(
                f"dataset {version.ref}: no column {column!r} "
                f"(columns: {', '.join(version.columns)})"
            )
    types = {c["name"]: str(c["type"]).upper() for c in version.schema}
    if image_column is not None and types[image_column] != "BLOB":
        raise InvalidInputError(
            f"dataset {version.ref}: column {image_column!r} holds {types[image_column]}, not "
            "image bytes (build the knowledge base from the image folder instead)"
        )
    out = Loaded(sources=[{"kind": "dataset", "ref": version.ref, "digest": version.content_hash}])
    for i, row in enumerate(head(version.ref, version.num_rows).to_pylist()):
        key = row.get(id_column) if id_column else i
        doc_id = f"{version.dataset}:{key}"
        text = row.get(text_column) if text_column else ""
        meta: dict[str, Any] = {
            k: v
            for k, v in row.items()
            if k != text_column and isinstance(v, str | int | float | bool)
        }
        meta.update({"source": version.ref, "row": i})
        if image_column is not None:
            _dataset_image(out, doc_id, row.get(image_column), text, meta, version.ref)
            continue
        if not isinstance(text, str) or not text.strip():
            out.quarantine.append({"document": doc_id, "reason": "empty document (no text)"})
            continue
        out.documents.append(Document(doc_id, text, meta))
    return out


def _dataset_image(
    out: Loaded, doc_id: str, value: Any, caption: Any, meta: dict[str, Any], ref: str
) -> None:
    """A dataset row's image document, or its quarantine entry."""
    from aifab.rag.images import image_document

    try:
        if not isinstance(value, bytes | bytearray):
            raise ValueError("empty (no image)")
        doc: Document = image_document(bytes(value), doc_id, str(caption or ""), ref)
    except ValueError as exc:
        out.quarantine.append({"document": doc_id, "reason": str(exc)})
        return
    out.documents.append(Document(doc.id, doc.text, {**meta, **doc.metadata}, doc.image))


def load_texts(items: Sequence[Mapping[str, Any]]) -> Loaded:
    """Documents given inline (``[{"id", "text", "image"?, "metadata"?}]``, as over HTTP).

    An item with an ``image`` (base64 or a ``data:image`` URL) is an image document whose
    ``text`` is its caption; an unreadable image is quarantined with the reason.

    Raises:
        InvalidInputError: an item without a string id or text (named by index), or an id
            given twice.
    """
    from aifab.core.ids import digest

    out = Loaded()
    seen: set[str] = set()
    for i, item in enumerate(items):
        doc_id, text = item.get("id"), item.get("text", "" if item.get("image") else None)
        meta = item.get("metadata") or {}
        if not isinstance(doc_id, str) or not doc_id.strip():
            raise InvalidInputError(f"documents[{i}].id: must be a non-empty string")
        if not isinstance(text, str):
            raise InvalidInputError(f"documents[{i}].text: must be a string")
        if not isinstance(meta, Mapping):
            raise InvalidInputError(f"documents[{i}].metadata: must be an object")
        if doc_id in seen:
            raise InvalidInputError(f"documents[{i}].id: {doc_id!r} is given twice")
        seen.add(doc_id)
        clean = {str(k): v for k, v in meta.items() if isinstance(v, str | int | float | bool)}
        if item.get("image"):
            doc = _inline_image(out, doc_id, item["image"], text)
            if doc is not None:
                out.documents.append(
                    Document(doc.id, doc.text, {**clean, **doc.metadata}, doc.image)
                )
                out.sources.append(
                    {"kind": "upload", "ref": doc_id, "digest": digest(item["image"])}
                )
            continue
        if not text.strip() or _CONTROL.search(text[:65536]):
            reason = "empty document (no text)" if not text.strip() else "control characters"
            out.quarantine.append({"document": doc_id, "reason": reason})
            continue
        out.documents.append(Document(doc_id, text, {**clean, "source": "upload"}))
        out.sources.append({"kind": "upload", "ref": doc_id, "digest": digest(text)})
    return out


def _inline_image(out: Loaded, doc_id: str, value: Any, caption: str) -> Document | None:
    """An inline image document, or None with the reason quarantined."""
    from aifab.rag.images import MAX_FILE_PIXELS, image_document, query_image

    if not isinstance(value, str):
        out.quarantine.append({"document": doc_id, "reason": "image: must be a base64 string"})
        return None
    try:  # checked and made a thumbnail as an image query is; the body cap bounds its size
        png = query_image(value, max_bytes=MAX_DOCUMENT_BYTES, max_pixels=MAX_FILE_PIXELS)
        doc: Document = image_document(png, doc_id, caption, "upload")
    except (InvalidInputError, ValueError) as exc:
        reason = exc.message if isinstance(exc, InvalidInputError) else str(exc)
        out.quarantine.append({"document": doc_id, "reason": reason})
        return None
    return doc
