"""``/v1/kb``: knowledge bases. Clients search and ask; developers create and change them.

Thin callers of :mod:`aifab.rag` run on a thread as the calling key. A chat model that is down
answers 502 and one that is too slow 504 (JSON errors, or an ``error`` event mid-stream).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from aifab import rag
from aifab.core.errors import AifabError
from aifab.prompts import UpstreamError, UpstreamTimeout
from aifab.serve.auth import Principal, require
from aifab.serve.errors import ApiError, as_api_error

router = APIRouter(prefix="/v1/kb", tags=["knowledge bases"])

#: Inline documents larger than this in total are refused before any work (413).
MAX_UPLOAD_BYTES = 32 * 1024 * 1024
_NAME = Field(..., min_length=1, max_length=100)


class InlineDocument(BaseModel):
    """A document sent in the request."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(..., min_length=1, max_length=500)
    text: str = Field("", description="The text; an image document's caption (may be empty).")
    image: str | None = Field(
        None, description="An image document: base64 or a data:image URL (a dual-encoder KB)."
    )
    metadata: dict[str, str | int | float | bool] = Field(default_factory=dict, max_length=50)


class KBCreate(BaseModel):
    """A new knowledge base from a server-side path, a dataset, or inline documents."""

    model_config = ConfigDict(extra="forbid")

    name: str = _NAME
    source: str | None = Field(None, description="Dataset NAME[@V] (with text_column).")
    text_column: str | None = Field(None, description="Dataset text column.")
    id_column: str | None = None
    image_column: str | None = Field(
        None, description="Dataset column of image bytes (a dual-encoder KB of images)."
    )
    documents: list[InlineDocument] | None = Field(None, max_length=100_000)
    config: dict[str, Any] | None = Field(None, description="KBConfig fields.")


class DocumentsAdd(BaseModel):
    """Documents to add (or replace, by id)."""

    model_config = ConfigDict(extra="forbid")

    documents: list[InlineDocument] = Field(..., min_length=1, max_length=100_000)


class DocumentsRemove(BaseModel):
    """Document ids to remove."""

    model_config = ConfigDict(extra="forbid")

    documents: list[str] = Field(..., min_length=1, max_length=100_000)


class SearchBody(BaseModel):
    """A search."""

    model_config = ConfigDict(extra="forbid")

    query: str = Field("", max_length=4096, description="A text (or give image or like).")
    image: str | None = Field(
        None,
        description="An image query: base64 or a data:image URL, capped at max_image_bytes "
        "before it is decoded and max_image_pixels before its pixels are.",
    )
    like: str | None = Field(None, max_length=500, description="A document id to match.")
    k: int = Field(5, ge=1, le=100)
    mode: str = Field("hybrid", pattern="^(dense|bm25|hybrid)$")
    filters: dict[str, str | int | float | bool] | None = Field(None, max_length=20)


class AnswerBody(BaseModel):
    """A question to answer with citations."""

    model_config = ConfigDict(extra="forbid")

    question: str = Field(..., min_length=1, max_length=4096)
    chat: str = Field(..., min_length=1, max_length=500, description="LM deployment or URL.")
    prompt: str = Field("kb-answer", max_length=200)
    k: int = Field(4, ge=1, le=20)
    mode: str = Field("hybrid", pattern="^(dense|bm25|hybrid)$")
    filters: dict[str, str | int | float | bool] | None = Field(None, max_length=20)
    redact: bool = False
    max_tokens: int = Field(256, ge=1, le=4096)
    timeout_s: float = Field(60.0, gt=0, le=300)
    stream: bool = False


async def _check_size(request: Request) -> None:
    length = request.headers.get("content-length")
    if length and length.isdigit() and int(length) > MAX_UPLOAD_BYTES:
        raise ApiError(413, f"body of {length} bytes is over {MAX_UPLOAD_BYTES}")


#: Chat base URLs a request may name, set by the operator (space or comma separated); any
#: other URL is refused, so a key cannot make the server call arbitrary hosts.
CHAT_URLS_ENV = "AIFAB_CHAT_URLS"


def _check_chat(chat: str) -> None:
    if not chat.startswith(("http://", "https://")):
        return  # a deployment name
    allowed = os.environ.get(CHAT_URLS_ENV, "").replace(",", " ").split()
    base = chat.partition("#")[0].rstrip("/")
    if base not in {a.partition("#")[0].rstrip("/") for a in allowed}:
        raise ApiError(
            403,
            f"chat: {base} is not an allowed chat URL (the operator lists them in "
            f"{CHAT_URLS_ENV}); name an LM deployment instead",
            param="chat",
            code="chat_url_not_allowed",
        )


def _upstream(exc: AifabError) -> ApiError:
    code = "upstream_timeout" if isinstance(exc, UpstreamTimeout) else "upstream_unavailable"
    return ApiError(exc.http_status, exc.message, code=code)


@router.get("")
async def list_all(principal: Principal = Depends(require("read", "invoke"))) -> list[dict]:
    """Every knowledge base with its version and counts."""
    return await principal.call(rag.list_kbs)


@router.post("", status_code=201, dependencies=[Depends(_check_size)])
async def create(body: KBCreate, principal: Principal = Depends(require("deploy"))) -> dict:
    """Build a knowledge base (quarantined documents come back with their reasons)."""
    if (body.source is None) == (body.documents is None):
        raise ApiError(422, "give exactly one of 'source' and 'documents'", param="source")
    if body.source is not None and body.text_column is None and body.image_column is None:
        # Server paths are indexed from the CLI only: a key must not read the server's disk.
        raise ApiError(
            422,
            "source: over HTTP, a source is a dataset and needs text_column (or image_column); "
            "send files as 'documents'",
            param="source",
        )
    source: Any = body.source
    if body.documents is not None:
        source = [d.model_dump() for d in body.documents]
    return await principal.call(
        rag.create_kb,
        body.name,
        source,
        text_column=body.text_column,
        id_column=body.id_column,
        config=body.config,
        image_column=body.image_column,
    )


@router.get("/{name}")
async def show(name: str, principal: Principal = Depends(require("read", "invoke"))) -> dict:
    """One knowledge base: settings, counts, quarantine."""
    return await principal.call(rag.get_kb, name)


@router.get("/{name}/lineage")
async def lineage(name: str, principal: Principal = Depends(require("read"))) -> list[dict]:
    """Every version with its sources and embedding model."""
    return await principal.call(rag.kb_lineage, name)


@router.post("/{name}/documents", dependencies=[Depends(_check_size)])
async def add(
    name: str, body: DocumentsAdd, principal: Principal = Depends(require("deploy"))
) -> dict:
    """Add or replace documents: a new version, only they are embedded."""
    docs = [d.model_dump() for d in body.documents]
    return await principal.call(rag.add_documents, name, docs)


@router.post("/{name}/documents/delete")
async def remove(
    name: str, body: DocumentsRemove, principal: Principal = Depends(require("deploy"))
) -> dict:
    """Remove documents by id: a new version."""
    return await principal.call(rag.delete_documents, name, body.documents)


@router.delete("/{name}")
async def delete(name: str, principal: Principal = Depends(require("deploy"))) -> dict:
    """Forget a knowledge base and its index files."""
    await principal.call(rag.delete_kb, name)
    return {"deleted": name}


@router.post("/{name}/search")
async def search(
    name: str, body: SearchBody, principal: Principal = Depends(require("invoke", "read"))
) -> dict:
    """Search by meaning, keywords or both, or by an image; empty ``results``: no match."""
    return await principal.call(
        rag.search,
        name,
        body.query,
        k=body.k,
        mode=body.mode,
        filters=body.filters,
        image=body.image,
        like=body.like,
    )


@router.post("/{name}/answer", response_model=None)
async def answer(
    name: str, body: AnswerBody, principal: Principal = Depends(require("invoke"))
) -> dict | StreamingResponse:
    """Answer with citations; ``stream: true`` sends server-sent events."""
    _check_chat(body.chat)
    opts = body.model_dump(exclude={"question", "stream"})
    try:
        if not body.stream:
            return await principal.call(rag.ask, name, body.question, **opts)
        events = await principal.call(rag.ask_stream, name, body.question, **opts)
    except (UpstreamError, UpstreamTimeout) as exc:
        raise _upstream(exc) from None
    return StreamingResponse(_sse(principal, events), media_type="text/event-stream")


async def _sse(principal: Principal, events: Iterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Each event as ``data: {json}``; a failing model ends the stream with an error event."""
    sentinel = object()
    while True:
        try:
            event = await principal.call(next, events, sentinel)
        except AifabError as exc:
            upstream = isinstance(exc, UpstreamError | UpstreamTimeout)
            err = _upstream(exc) if upstream else as_api_error(exc)
            body = {"type": "error", "status": err.status, "code": err.code, "message": err.message}
            yield f"data: {json.dumps(body)}\n\n".encode()
            break
        if event is sentinel:
            break
        yield f"data: {json.dumps(event, default=str)}\n\n".encode()
    yield b"data: [DONE]\n\n"
