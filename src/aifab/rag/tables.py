"""Metadata tables of knowledge bases: each KB and its immutable versions (with lineage)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import JSON, Float, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from aifab.core.db import Base


class KnowledgeBaseRow(Base):
    """A knowledge base: its settings and the version searches use."""

    __tablename__ = "knowledge_bases"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    #: The embedder source (``builtin:all-minilm-l6-v2``, a registry ref, a model dir, a URL).
    embedder: Mapped[str] = mapped_column(String(300), nullable=False)
    #: Chunking and index settings (:class:`aifab.rag.config.KBConfig`).
    config: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    current_version: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    created_by: Mapped[str] = mapped_column(String(200), nullable=False, default="")
    created_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)
    updated_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)


class KBVersionRow(Base):
    """One built version of a knowledge base: what it was built from, counts, quarantine."""

    __tablename__ = "kb_versions"

    kb: Mapped[str] = mapped_column(String(100), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    parent: Mapped[int | None] = mapped_column(Integer)
    #: ``[{"kind": "dataset"|"file", "ref", "digest"}]`` of every document source.
    sources: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False, default=list)
    embedder: Mapped[str] = mapped_column(String(300), nullable=False)
    #: documents, chunks, embedded (new), reused (embeddings kept from the parent), quarantined.
    counts: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    #: ``[{"document", "reason"}]`` documents that could not be indexed.
    quarantine: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False, default=list)
    index_dir: Mapped[str] = mapped_column(String(500), nullable=False)
    created_by: Mapped[str] = mapped_column(String(200), nullable=False, default="")
    created_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)
