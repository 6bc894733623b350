"""Building one KB version folder in a hidden staging folder.

New documents are chunked; embeddings are reused by chunk id or computed; the dense index is
extended or rebuilt; BM25 is rebuilt.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aifab.core.errors import InvalidInputError
from aifab.rag.chunking import Chunk, chunk_document, chunk_id, count_tokens
from aifab.rag.config import KBConfig
from aifab.rag.documents import Document
from aifab.rag.embedders import get_embedder
from aifab.rag.images import image_digest, image_url
from aifab.rag.index import INDEXES
from aifab.rag.keyword import KeywordIndex
from aifab.rag.store import KBFiles, staging_dir, write_version

__all__ = ["Progress", "build_version", "image_chunk"]

#: ``progress(stage, done, total)``: stages are ``read``, ``embed``, ``index``.
Progress = Callable[[str, int, int], None]


def _embed(
    cfg: KBConfig, new: list[Chunk], parent: KBFiles | None, progress: Progress | None
) -> tuple[np.ndarray, int]:
    """Vectors of the new chunks: the parent's where the chunk id is known, else embedded."""
    known = {c["id"]: i for i, c in enumerate(parent.chunks)} if parent is not None else {}
    todo = [i for i, c in enumerate(new) if c.id not in known]
    embedder = get_embedder(cfg.embedder)
    vectors = np.zeros((len(new), embedder.dimension), dtype="float32")
    for i, c in enumerate(new):
        if c.id in known and parent is not None:
            vectors[i] = parent.vectors[known[c.id]]
    if todo:
        texts = [_embeddable(new[i]) for i in todo]
        if any(new[i].image is not None for i in todo):
            _check_images(embedder, cfg.embedder)
        report = (lambda done: progress("embed", done, len(todo))) if progress else None
        vectors[todo] = embedder.embed(texts, progress=report)
    return vectors, len(todo)


def _embeddable(chunk: Chunk) -> str:
    """What the embedder gets: an image as a ``data:image`` URL, a text with its heading."""
    if chunk.image is not None:
        return image_url(chunk.image)
    return f"{chunk.heading}\n{chunk.text}" if chunk.heading else chunk.text


def _check_images(embedder: Any, source: str) -> None:
    if "image" not in getattr(embedder, "modalities", ("text",)):
        raise InvalidInputError(
            f"embedder {source}: embeds text only; image documents need a dual encoder "
            "(create the knowledge base with --embedder NAME@VERSION of a contrastive model)"
        )


def image_chunk(doc: Document) -> Chunk:
    """An image document's one chunk: the thumbnail, its caption as text.

    The id hashes the image too, so a changed image under the same name is embedded again.
    """
    assert doc.image is not None
    return Chunk(
        id=chunk_id(doc.id, 0, f"{image_digest(doc.image)}\x00{doc.text}"),
        document=doc.id,
        position=0,
        text=doc.text,
        tokens=count_tokens(doc.text),
        metadata=doc.metadata,
        image=doc.image,
    )


def _dense(cfg: KBConfig, vectors: np.ndarray, parent: KBFiles | None, appended_from: int) -> Any:
    """Extend the parent's index when rows were only appended; else build from the vectors."""
    backend = INDEXES.get(cfg.index)
    options = {"m": cfg.hnsw_m, "ef_search": cfg.hnsw_ef_search}
    wanted = "hnsw" if len(vectors) >= cfg.hnsw_threshold else "flat"
    if parent is not None and appended_from == len(parent.chunks) and parent.dense.kind == wanted:
        dense = backend.load(
            Path(parent.manifest["dir"]) / "dense.faiss", wanted, cfg.hnsw_ef_search
        )
        dense.add(vectors[appended_from:])
        return dense
    return backend.build(vectors, cfg.hnsw_threshold, **options)


def build_version(
    name: str,
    cfg: KBConfig,
    parent: KBFiles | None,
    docs: Sequence[Document],
    remove: set[str],
    progress: Progress | None,
) -> tuple[Path, dict[str, Any]]:
    """Build a version folder from the parent, minus ``remove``, plus ``docs``."""
    started = time.perf_counter()
    replaced = remove | {d.id for d in docs}
    kept_rows = [
        i for i, c in enumerate(parent.chunks if parent else []) if c["document"] not in replaced
    ]
    kept = [parent.chunk(i) for i in kept_rows] if parent else []
    new: list[Chunk] = []
    for n, doc in enumerate(docs, 1):
        new.extend(
            [image_chunk(doc)]
            if doc.image is not None
            else chunk_document(
                doc.id,
                doc.text,
                size=cfg.chunk_tokens,
                overlap=cfg.chunk_overlap,
                metadata=doc.metadata,
            )
        )
        if progress:
            progress("read", n, len(docs))
    new_vectors, embedded = _embed(cfg, new, parent, progress)
    old_vectors = (
        np.asarray(parent.vectors[kept_rows]) if parent is not None and kept_rows else None
    )
    vectors = new_vectors if old_vectors is None else np.vstack([old_vectors, new_vectors])
    chunks = kept + new
    if progress:
        progress("index", 0, len(chunks))
    unchanged_prefix = parent is not None and kept_rows == list(range(len(parent.chunks)))
    dense = _dense(cfg, vectors, parent, len(kept) if unchanged_prefix else -1)
    keyword = KeywordIndex.build([f"{c.heading}\n{c.text}" for c in chunks])
    staged = staging_dir(name)
    documents = len({c.document for c in chunks})
    stats = {
        "documents": documents,
        "chunks": len(chunks),
        "added_documents": len(docs),
        "removed_chunks": (len(parent.chunks) - len(kept)) if parent else 0,
        "embedded": embedded,
        "reused": len(new) - embedded + len(kept),
        "dense_kind": dense.kind,
        "seconds": round(time.perf_counter() - started, 3),
    }
    manifest = {"kb": name, "config": cfg.model_dump(), "dense_kind": dense.kind, **stats}
    try:
        write_version(staged, chunks, vectors, dense, keyword, manifest)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    if progress:
        progress("index", len(chunks), len(chunks))
    return staged, stats
