"""Building knowledge bases: create, add and delete documents (incrementally), lineage.

A new version keeps the parent's chunks and their vectors; only new or changed documents are
chunked and embedded (chunk ids are stable, so unchanged text is never embedded twice), and
when nothing was removed the parent's dense index is extended rather than rebuilt.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import select

from aifab.core.actor import current_actor
from aifab.core.audit import record_event
from aifab.core.config import parse_config
from aifab.core.db import lock_aggregate, session_scope
from aifab.core.errors import ConflictError, InvalidInputError, NotFoundError
from aifab.core.names import SHORT_NAME, is_full_match
from aifab.rag.config import KBConfig
from aifab.rag.documents import Loaded, load_dataset, load_path, load_texts
from aifab.rag.indexing import Progress, build_version
from aifab.rag.store import KBFiles, kb_root, load_version, publish
from aifab.rag.tables import KBVersionRow, KnowledgeBaseRow

__all__ = [
    "Progress",
    "add_documents",
    "create_kb",
    "delete_documents",
    "delete_kb",
    "get_kb",
    "kb_lineage",
    "list_kbs",
    "load_kb",
    "sync_kb",
]


def _check_name(name: str) -> str:
    if not is_full_match(SHORT_NAME, name):
        raise InvalidInputError(f"knowledge base name {name!r}: letters, digits, '.', '_', '-'")
    return name


#: A source: a path, a dataset ref (with a text column), or inline documents.
Source = str | Sequence[Mapping[str, Any]]


def _read(
    source: Source, text_column: str | None, id_column: str | None, image_column: str | None
) -> Loaded:
    if not isinstance(source, str):
        return load_texts(source)
    if text_column is not None or image_column is not None:
        return load_dataset(source, text_column, id_column, image_column)
    if id_column is not None:
        raise InvalidInputError("--id-column needs --text-column (a dataset source)")
    return load_path(source)


def _kb_dict(row: KnowledgeBaseRow, version: KBVersionRow | None) -> dict[str, Any]:
    out = {
        "name": row.name,
        "embedder": row.embedder,
        "config": dict(row.config),
        "version": row.current_version,
        "created_by": row.created_by,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }
    if version is not None:
        out.update(counts=dict(version.counts), quarantine=list(version.quarantine))
    return out


def _version_dict(v: KBVersionRow) -> dict[str, Any]:
    return {
        "kb": v.kb,
        "version": v.version,
        "parent": v.parent,
        "embedder": v.embedder,
        "sources": list(v.sources),
        "counts": dict(v.counts),
        "quarantine": list(v.quarantine),
        "index_dir": v.index_dir,
        "created_by": v.created_by,
        "created_at": v.created_at,
    }


def _record(
    name: str,
    cfg: KBConfig | None,
    staged: Path,
    stats: dict[str, Any],
    loaded: Loaded,
    action: str,
) -> dict[str, Any]:
    """Publish a staged folder as the next version and record it (one transaction)."""
    with session_scope() as s:
        lock_aggregate(s, "kb", name)  # versions of one knowledge base are numbered in turn
        row = s.get(KnowledgeBaseRow, name)
        if row is None:
            if cfg is None:
                raise NotFoundError(f"knowledge base {name!r} not found")
            row = KnowledgeBaseRow(
                name=name,
                embedder=cfg.embedder,
                config=cfg.model_dump(),
                current_version=0,
                created_by=current_actor(),
                created_at=time.time(),
                updated_at=time.time(),
            )
            s.add(row)
        elif cfg is not None:
            raise ConflictError(f"knowledge base {name!r} already exists (use 'aifab kb add')")
        parent = s.get(KBVersionRow, (name, row.current_version)) if row.current_version else None
        version = row.current_version + 1
        final = publish(staged, name, version)
        sources = [*(parent.sources if parent else []), *loaded.sources]
        v = KBVersionRow(
            kb=name,
            version=version,
            parent=parent.version if parent else None,
            sources=sources,
            embedder=row.embedder,
            counts={**stats, "quarantined": len(loaded.quarantine)},
            quarantine=loaded.quarantine,
            index_dir=str(final),
            created_by=current_actor(),
            created_at=time.time(),
        )
        s.add(v)
        row.current_version = version
        row.updated_at = time.time()
        s.flush()
        record_event(s, action, f"kb:{name}@{version}", {"counts": v.counts})
        return _kb_dict(row, v)


def create_kb(
    name: str,
    source: Source,
    *,
    text_column: str | None = None,
    id_column: str | None = None,
    config: KBConfig | dict[str, Any] | None = None,
    progress: Progress | None = None,
    image_column: str | None = None,
) -> dict[str, Any]:
    """Build a new knowledge base from a file, folder or dataset version (version 1).

    Args:
        name: KB name.
        source: a file or folder (txt, md, html, pdf), with ``text_column`` a dataset ref, or
            inline documents ``[{"id", "text", "metadata"}]``.
        text_column: the dataset column holding the text.
        id_column: the dataset column naming each document (default: the row number).
        image_column: a dataset column of image bytes: each row is an image document
            (captioned by ``text_column`` when given; needs a dual-encoder embedder).
        config: chunking, embedder and index settings.
        progress: called as ``progress(stage, done, total)``.

    Returns:
        The KB with its version, counts and quarantined documents (with reasons).

    Raises:
        ConflictError: the name is taken.
        InvalidInputError: no document could be read (each reason named), bad settings.
        EmbedderUnavailable: the embedding model cannot be loaded.
    """
    _check_name(name)
    cfg = config if isinstance(config, KBConfig) else parse_config(KBConfig, config, "config")
    with session_scope() as s:
        if s.get(KnowledgeBaseRow, name) is not None:
            raise ConflictError(f"knowledge base {name!r} already exists (use 'aifab kb add')")
    loaded = _read(source, text_column, id_column, image_column)
    if not loaded.documents:
        reasons = "; ".join(f"{q['document']}: {q['reason']}" for q in loaded.quarantine[:5])
        where = source if isinstance(source, str) else "documents"
        raise InvalidInputError(f"{where}: no document could be indexed ({reasons or 'empty'})")
    staged, stats = build_version(name, cfg, None, loaded.documents, set(), progress)
    return _record(name, cfg, staged, stats, loaded, "kb.create")


def _current(name: str) -> tuple[KBConfig, KBFiles]:
    with session_scope(readonly=True) as s:
        row = s.get(KnowledgeBaseRow, _check_name(name))
        if row is None:
            raise NotFoundError(f"knowledge base {name!r} not found")
        v = s.get(KBVersionRow, (name, row.current_version))
        assert v is not None
        cfg = KBConfig.model_validate(row.config)
        version, directory, created = v.version, v.index_dir, v.created_at
    files = load_version(name, version, directory, cfg.hnsw_ef_search, created)
    files.manifest.setdefault("dir", directory)
    return cfg, files


def load_kb(name: str) -> tuple[KBConfig, KBFiles]:
    """The settings and loaded files of a KB's current version.

    Raises:
        NotFoundError: no KB of that name.
    """
    return _current(name)


def add_documents(
    name: str,
    source: Source,
    *,
    text_column: str | None = None,
    id_column: str | None = None,
    progress: Progress | None = None,
    image_column: str | None = None,
) -> dict[str, Any]:
    """A new version with documents added (a document id already there is replaced).

    Only the new documents are chunked and embedded; the dense index is extended in place.

    Raises:
        NotFoundError: unknown KB.
        InvalidInputError: no document in ``source`` could be read (reasons named).
    """
    cfg, parent = _current(name)
    loaded = _read(source, text_column, id_column, image_column)
    if not loaded.documents:
        reasons = "; ".join(f"{q['document']}: {q['reason']}" for q in loaded.quarantine[:5])
        where = source if isinstance(source, str) else "documents"
        raise InvalidInputError(f"{where}: no document could be indexed ({reasons or 'empty'})")
    staged, stats = build_version(name, cfg, parent, loaded.documents, set(), progress)
    return _record(name, None, staged, stats, loaded, "kb.add")


def sync_kb(
    name: str,
    source: Source,
    *,
    text_column: str | None = None,
    id_column: str | None = None,
    config: KBConfig | dict[str, Any] | None = None,
    progress: Progress | None = None,
    image_column: str | None = None,
) -> dict[str, Any]:
    """Create the KB, or add what changed in ``source``; unchanged sources make no version.

    For pipelines: running it again on the same files is a no-op (``action: unchanged``).

    Returns:
        The KB (as :func:`get_kb`) with ``action``: ``created``, ``updated`` or ``unchanged``.
    """
    with session_scope() as s:
        exists = s.get(KnowledgeBaseRow, _check_name(name)) is not None
    if not exists:
        kb = create_kb(
            name,
            source,
            text_column=text_column,
            id_column=id_column,
            config=config,
            progress=progress,
            image_column=image_column,
        )
        return {**kb, "action": "created"}
    current = kb_lineage(name)[0]
    loaded = _read(source, text_column, id_column, image_column)
    if loaded.documents and all(src in current["sources"] for src in loaded.sources):
        return {**get_kb(name), "action": "unchanged"}
    kb = add_documents(
        name,
        source,
        text_column=text_column,
        id_column=id_column,
        progress=progress,
        image_column=image_column,
    )
    return {**kb, "action": "updated"}


def delete_documents(name: str, documents: Sequence[str]) -> dict[str, Any]:
    """A new version without ``documents`` (ids as ``aifab kb search`` shows them).

    Raises:
        NotFoundError: unknown KB, or a document id not in it (named).
        InvalidInputError: nothing would be left.
    """
    cfg, parent = _current(name)
    present = {c["document"] for c in parent.chunks}
    unknown = [d for d in documents if d not in present]
    if unknown:
        raise NotFoundError(f"knowledge base {name!r} has no document {unknown[0]!r}")
    if present <= set(documents):
        raise InvalidInputError("that would delete every document: use 'aifab kb delete'")
    staged, stats = build_version(name, cfg, parent, [], set(documents), None)
    return _record(name, None, staged, stats, Loaded(), "kb.delete_documents")


def delete_kb(name: str) -> None:
    """Forget a KB and remove its index files (audited).

    Raises:
        NotFoundError: unknown KB.
    """
    with session_scope() as s:
        row = s.get(KnowledgeBaseRow, _check_name(name))
        if row is None:
            raise NotFoundError(f"knowledge base {name!r} not found")
        for v in s.scalars(select(KBVersionRow).where(KBVersionRow.kb == name)):
            s.delete(v)
        s.delete(row)
        record_event(s, "kb.delete", f"kb:{name}", {})
    shutil.rmtree(kb_root(name), ignore_errors=True)


def get_kb(name: str) -> dict[str, Any]:
    """A KB with its current version's counts and quarantine.

    Raises:
        NotFoundError: unknown KB.
    """
    with session_scope(readonly=True) as s:
        row = s.get(KnowledgeBaseRow, _check_name(name))
        if row is None:
            raise NotFoundError(f"knowledge base {name!r} not found")
        return _kb_dict(row, s.get(KBVersionRow, (name, row.current_version)))


def list_kbs() -> list[dict[str, Any]]:
    """Every KB, by name."""
    with session_scope(readonly=True) as s:
        rows = list(s.scalars(select(KnowledgeBaseRow).order_by(KnowledgeBaseRow.name)))
        return [_kb_dict(r, s.get(KBVersionRow, (r.name, r.current_version))) for r in rows]


def kb_lineage(name: str) -> list[dict[str, Any]]:
    """Every version of a KB, newest first.

    Each with its sources (dataset versions, files with digests), embedding model, counts
    and parent.

    Raises:
        NotFoundError: unknown KB.
    """
    get_kb(name)
    with session_scope(readonly=True) as s:
        rows = s.scalars(
            select(KBVersionRow)
            .where(KBVersionRow.kb == name)
            .order_by(KBVersionRow.version.desc())
        )
        return [_version_dict(v) for v in rows]
