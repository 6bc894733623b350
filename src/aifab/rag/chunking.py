"""Chunking (pure): markdown-heading-aware sections cut into token windows with overlap.

Tokens are words and punctuation marks (a close, cheap stand-in for wordpieces); a chunk's
text is the original slice, formatting kept. Chunk ids hash the document id, position and
content, so rebuilding from the same text gives the same ids (and reuses their embeddings).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from aifab.core.errors import InvalidInputError

__all__ = ["Chunk", "chunk_document", "chunk_id", "count_tokens"]

_TOKEN = re.compile(r"\w+|[^\w\s]")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Chunk:
    """One retrievable piece of a document."""

    id: str
    document: str
    position: int
    text: str
    heading: str = ""
    tokens: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    #: An image document's PNG thumbnail (its one chunk is the image; ``text`` its caption).
    image: bytes | None = None


def count_tokens(text: str) -> int:
    """Tokens as the chunker counts them."""
    return sum(1 for _ in _TOKEN.finditer(text))


def chunk_id(document: str, position: int, text: str) -> str:
    """Stable id of a chunk: sha256 of document, position and content, 24 hex digits."""
    h = hashlib.sha256(f"{document}\x00{position}\x00{text}".encode()).hexdigest()
    return h[:24]


def _sections(text: str) -> list[tuple[str, int, int]]:
    """``(heading path, start, end)`` of each markdown section (text before any heading: "")."""
    # A "# comment" inside a fenced code block is code, not a heading.
    fences = [m.span() for m in _FENCE.finditer(text)]
    marks = [m for m in _HEADING.finditer(text) if not any(a <= m.start() < b for a, b in fences)]
    out: list[tuple[str, int, int]] = []
    if not marks or marks[0].start() > 0:
        out.append(("", 0, marks[0].start() if marks else len(text)))
    path: list[tuple[int, str]] = []
    for i, m in enumerate(marks):
        level = len(m.group(1))
        path = [(lv, t) for lv, t in path if lv < level] + [(level, m.group(2))]
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out.append((" > ".join(t for _, t in path), m.start(), end))
    return out


def _windows(text: str, start: int, end: int, size: int, overlap: int) -> list[tuple[int, int]]:
    spans = [m.span() for m in _TOKEN.finditer(text, start, end)]
    if not spans:
        return []
    out = []
    step = size - overlap
    for first in range(0, len(spans), step):
        last = min(first + size, len(spans))
        out.append((spans[first][0], spans[last - 1][1]))
        if last == len(spans):
            break
    return out


def chunk_document(
    document: str,
    text: str,
    *,
    size: int = 160,
    overlap: int = 32,
    metadata: dict[str, Any] | None = None,
) -> list[Chunk]:
    """Cut one document into chunks of at most ``size`` tokens overlapping by ``overlap``.

    A chunk never crosses a markdown heading; its ``heading`` is the heading path
    (``Guide > Install``), which is also prepended to the text that gets embedded.

    Raises:
        InvalidInputError: ``size`` < 8 or ``overlap`` not in [0, size/2].
    """
    if size < 8:
        raise InvalidInputError(f"chunk size: must be at least 8 tokens, got {size}")
    if not 0 <= overlap <= size // 2:
        raise InvalidInputError(f"chunk overlap: must be between 0 and {size // 2}, got {overlap}")
    chunks: list[Chunk] = []
    for heading, start, end in _sections(text):
        for a, b in _windows(text, start, end, size, overlap):
            piece = text[a:b]
            pos = len(chunks)
            chunks.append(
                Chunk(
                    id=chunk_id(document, pos, piece),
                    document=document,
                    position=pos,
                    text=piece,
                    heading=heading,
                    tokens=count_tokens(piece),
                    metadata=dict(metadata or {}),
                )
            )
    return chunks
