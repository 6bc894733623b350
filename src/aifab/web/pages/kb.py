"""``/ui/kb``: knowledge bases, hybrid search over one, and answers with their citations.

Search and ask are GET forms (reads: the query stays in the URL, the page can be reloaded).
Asking calls a chat model, so it needs the same ``invoke`` permission as the API's answer route,
and a URL as the chat model only when the operator allowed it (``AIFAB_CHAT_URLS``).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from aifab import rag
from aifab.core.errors import AifabError
from aifab.inference.deployments import list_deployments
from aifab.serve.routes.kb import CHAT_URLS_ENV
from aifab.web.auth import UiError, Viewer, need, viewer
from aifab.web.render import page
from aifab.web.routing import UiRoute

__all__ = ["router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)

#: Longest query or question the forms accept (as the API's bodies).
MAX_QUERY = 4096
MODES = ("hybrid", "dense", "bm25")


@router.get("/ui/kb")
async def kbs(request: Request, who: Viewer = Depends(viewer)) -> Response:
    """Every knowledge base with its version and counts."""
    rows = await asyncio.to_thread(rag.list_kbs)
    return page(request, "kb/list.html", kbs=rows)


def _check_chat(chat: str) -> None:
    if not chat.startswith(("http://", "https://")):
        return
    allowed = os.environ.get(CHAT_URLS_ENV, "").replace(",", " ").split()
    base = chat.partition("#")[0].rstrip("/")
    if base not in {a.partition("#")[0].rstrip("/") for a in allowed}:
        raise UiError(403, f"chat: {base} is not an allowed chat URL; name an LM deployment")


def _ask(name: str, question: str, chat: str, mode: str) -> dict[str, Any]:
    """The answer, or the error that stopped it (a model down is a message, not a crash)."""
    try:
        return {"ok": True, **rag.ask(name, question, chat=chat, mode=mode, timeout_s=60.0)}
    except AifabError as exc:
        return {"ok": False, "error": exc.message}


def _search(name: str, query: str, mode: str, like: str) -> dict[str, Any]:
    try:
        return {"ok": True, **rag.search(name, query, k=10, mode=mode, like=like or None)}
    except rag.EmbedderUnavailable as exc:
        return {"ok": False, "error": str(exc)}


def _kb_page(
    name: str, query: str, question: str, chat: str, mode: str, like: str
) -> dict[str, Any]:
    kb = rag.get_kb(name)
    return {
        "kb": kb,
        "results": _search(name, query, mode, like) if (query or like) else None,
        "answer": _ask(name, question, chat, mode) if question and chat else None,
        "deployments": [d["name"] for d in list_deployments()],
    }


def _field(value: str | None, what: str) -> str:
    text = (value or "").strip()
    if len(text) > MAX_QUERY:
        raise UiError(400, f"{what}: at most {MAX_QUERY} characters")
    return text


@router.get("/ui/kb/{name}")
async def kb(
    request: Request,
    name: str,
    q: str | None = None,
    question: str | None = None,
    chat: str | None = None,
    mode: str = "hybrid",
    like: str | None = None,
    who: Viewer = Depends(viewer),
) -> Response:
    """One knowledge base: its sources and quarantine, a search box and an ask form.

    Image documents show as thumbnails; ``like`` (a document id) finds the ones like it.
    """
    if mode not in MODES:
        raise UiError(400, f"mode {mode!r}: use one of {', '.join(MODES)}")
    query, asked, model = _field(q, "q"), _field(question, "question"), _field(chat, "chat")
    similar = _field(like, "like")
    if query and similar:
        raise UiError(400, "q and like: search by a text or by a document, not both")
    if asked:
        need(who, "invoke")
        if not model:
            raise UiError(400, "chat: name the chat model (an LM deployment) that answers")
        _check_chat(model)
    data = await asyncio.to_thread(_kb_page, name, query, asked, model, mode, similar)
    return page(
        request,
        "kb/kb.html",
        q=query,
        like=similar,
        question=asked,
        chat=model,
        mode=mode,
        modes=MODES,
        **data,
    )
