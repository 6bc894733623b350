"""Layer 3, rag: knowledge bases, retrieval, answers with citations, retrieval evaluation.

Documents, chunking, embedders and faiss/BM25 indexes live in the submodules.

Every public service is importable from here (``from aifab.rag import search``).
"""

from __future__ import annotations

from aifab.rag.answer import ask, ask_stream
from aifab.rag.build import (
    add_documents,
    create_kb,
    delete_documents,
    delete_kb,
    get_kb,
    kb_lineage,
    list_kbs,
    sync_kb,
)
from aifab.rag.config import KBConfig
from aifab.rag.embedders import EmbedderUnavailable
from aifab.rag.evaluate import eval_kb, load_qa
from aifab.rag.search import search

__all__ = [
    "EmbedderUnavailable",
    "KBConfig",
    "add_documents",
    "ask",
    "ask_stream",
    "create_kb",
    "delete_documents",
    "delete_kb",
    "eval_kb",
    "get_kb",
    "kb_lineage",
    "list_kbs",
    "load_qa",
    "search",
    "sync_kb",
]
