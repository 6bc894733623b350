"""The text of a PDF document (pypdf), for document ingest and knowledge bases alike."""

from __future__ import annotations

import io


def pdf_text(data: bytes) -> str:
    """The text of every page of the PDF ``data``, pages separated by blank lines.

    Raises:
        ValueError: a PDF that pypdf cannot read, with the library's reason.
    """
    import logging

    from pypdf import PdfReader

    # pypdf logs each repair attempt; the quarantine reason is what users need.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        pages = [page.extract_text() or "" for page in reader.pages]
    # pypdf raises its own errors and, on badly broken files, plain library ones.
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise ValueError(f"broken PDF: {type(exc).__name__}: {exc}") from None
    return "\n\n".join(p.strip() for p in pages)
