"""Retrieval: dense, BM25 and hybrid (reciprocal-rank fusion) search.

With metadata filters and an optional cross-encoder rerank.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.rag.build import load_kb
from aifab.rag.embedders import get_embedder
from aifab.rag.images import image_url, query_image
from aifab.rag.store import KBFiles

__all__ = ["MAX_K", "MAX_QUERY_CHARS", "MODES", "RRF_K", "embed_queries", "rrf", "search"]

MODES = ("dense", "bm25", "hybrid")
MAX_K = 100
MAX_QUERY_CHARS = 4096
#: The constant of reciprocal-rank fusion (Cormack et al. use 60).
RRF_K = 60


def rrf(rankings: list[list[int]], k: int = RRF_K) -> list[tuple[int, float]]:
    """Fuse ranked row lists: score(row) = sum over lists of 1 / (k + rank), best first."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, row in enumerate(ranking, 1):
            scores[row] = scores.get(row, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def _allowed(files: KBFiles, filters: Mapping[str, Any] | None) -> np.ndarray | None:
    """Row mask of chunks whose metadata (or document) matches every filter."""
    if not filters:
        return None
    import json

    mask = np.ones(len(files.chunks), dtype=bool)
    for i, c in enumerate(files.chunks):
        meta = {**json.loads(c["metadata"]), "document": c["document"]}
        mask[i] = all(str(meta.get(k)) == str(v) for k, v in filters.items())
    return mask


def _dense(files: KBFiles, q: np.ndarray, depth: int, mask: np.ndarray | None) -> list[int]:
    # Filtered searches look deeper so enough allowed rows survive.
    fetch = len(files.chunks) if mask is not None else depth
    _, rows = files.dense.search(q.reshape(1, -1), fetch)
    out = [int(r) for r in rows[0] if r >= 0 and (mask is None or mask[r])]
    return out[:depth]


def embed_queries(name: str, queries: list[str]) -> np.ndarray:
    """Query vectors for KB ``name``'s embedder, in one batch (evaluation embeds all at once).

    Raises:
        EmbedderUnavailable: the KB's embedder is gone.
    """
    _, files = load_kb(name)
    return np.asarray(get_embedder(files.manifest["config"]["embedder"]).embed(queries))


def _bm25(files: KBFiles, query: str, depth: int, mask: np.ndarray | None) -> list[int]:
    scores = files.keyword.scores(query)
    if mask is not None:
        scores = np.where(mask, scores, 0.0)
    hits = np.flatnonzero(scores > 0)
    if not len(hits):
        return []
    top = hits[np.argsort(-scores[hits], kind="stable")][:depth]
    return [int(r) for r in top]


_RERANKERS: dict[str, Any] = {}
_RERANK_LOCK = threading.Lock()


def _rerank(path: str, query: str, files: KBFiles, rows: list[int]) -> list[tuple[int, float]]:
    """Score ``(query, chunk)`` pairs with a cross-encoder from a local directory."""
    if not Path(path).expanduser().is_dir():
        raise InvalidInputError(f"rerank: {path} is not a local model directory")
    with _RERANK_LOCK:
        if path not in _RERANKERS:
            from sentence_transformers import CrossEncoder

            try:
                _RERANKERS[path] = CrossEncoder(str(Path(path).expanduser()), device="cpu")
            except (OSError, ValueError) as exc:
                raise InvalidInputError(f"rerank: cannot load {path}: {exc}") from None
        model = _RERANKERS[path]
    scores = model.predict(
        [(query, files.chunks[r]["text"]) for r in rows], show_progress_bar=False
    )
    ranked = sorted(
        zip(rows, (float(s) for s in np.ravel(scores)), strict=True), key=lambda t: -t[1]
    )
    return ranked


def _hit(files: KBFiles, row: int, score: float, ranks: dict[str, int]) -> dict[str, Any]:
    import json

    c = files.chunks[row]
    return {
        "id": c["id"],
        "document": c["document"],
        "position": c["position"],
        "heading": c["heading"],
        "text": c["text"],
        "score": round(float(score), 6),
        "ranks": ranks,
        "metadata": json.loads(c["metadata"]),
        # An image document's thumbnail, ready for an <img src> or a client to decode.
        "image": image_url(c["image"]) if c.get("image") else None,
    }


def _image_vector(files: KBFiles, image: str | bytes | None, like: str | None) -> np.ndarray:
    """The query vector of an image query: a new image, embedded, or a stored document's."""
    if like is not None:
        rows = [i for i, c in enumerate(files.chunks) if c["document"] == like]
        if not rows:
            raise NotFoundError(f"knowledge base {files.kb!r} has no document {like!r}")
        return np.asarray(files.vectors[rows[0]], dtype="float32")
    assert image is not None
    png = query_image(image)
    source = files.manifest["config"]["embedder"]
    embedder = get_embedder(source)
    if "image" not in getattr(embedder, "modalities", ("text",)):
        raise InvalidInputError(f"image: the embedder {source} embeds text only, not images")
    return np.asarray(embedder.embed([image_url(png)])[0], dtype="float32")


def _check_query(query: str, image: str | bytes | None, like: str | None, mode: str) -> str:
    """The mode to run; a query is exactly one of a text, an image and a document to match."""
    given = [what for what, v in (("query", query), ("image", image), ("like", like)) if v]
    if len(given) != 1:
        raise InvalidInputError(
            "query: give exactly one of a text query, an image and like "
            f"(got {', '.join(given) or 'none'})"
        )
    if given[0] == "query":
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError("query: must be a non-empty string")
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidInputError(f"query: {len(query)} characters is over {MAX_QUERY_CHARS}")
        return mode
    if mode == "bm25":
        raise InvalidInputError("mode: an image query searches by meaning (dense), not bm25")
    return "dense"  # hybrid's keyword half has no words to match in an image


def search(
    name: str,
    query: str = "",
    *,
    k: int = 5,
    mode: str = "hybrid",
    filters: Mapping[str, Any] | None = None,
    rerank: str | None = None,
    query_vector: np.ndarray | None = None,
    image: str | bytes | None = None,
    like: str | None = None,
) -> dict[str, Any]:
    """Search knowledge base ``name`` by a text, an image, or a stored document's likeness.

    Args:
        name: KB name.
        query: the text to look for (with a dual-encoder embedder, it finds images too).
        k: results to return (1-100).
        mode: ``dense`` (by meaning), ``bm25`` (by keyword) or ``hybrid`` (both, fused by
            reciprocal rank).
        filters: metadata equality filters (``{"type": "md"}``; ``document`` too).
        rerank: a local cross-encoder directory that re-scores the fused candidates.
        query_vector: the query's embedding when the caller has it (:func:`embed_queries`).
        image: an image to find similar ones to (bytes, base64 or a ``data:image`` URL;
            capped at ``max_image_bytes`` before decoding and ``max_image_pixels`` before
            pixel decoding); dense search with the KB's dual encoder.
        like: a document id of the KB: find documents like it (its stored vector).

    Returns:
        ``{"kb", "version", "mode", "results": [...], "timings_ms"}``; ``results`` may be empty
        (nothing matched), each with id, document, position, heading, text, score, ranks,
        metadata and ``image`` (an image document's thumbnail as a ``data:image`` URL).

    Raises:
        NotFoundError: unknown KB.
        InvalidInputError: empty or oversized query, a bad or oversized image (the cap
            named), bad k or mode (named).
        EmbedderUnavailable: dense or hybrid search, and the KB's embedder is gone.
    """
    if mode not in MODES:
        raise InvalidInputError(f"mode: must be one of {', '.join(MODES)}, got {mode!r}")
    if not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InvalidInputError(f"k: must be between 1 and {MAX_K}, got {k!r}")
    mode = _check_query(query, image, like, mode)
    if rerank and not query:
        raise InvalidInputError("rerank: a cross-encoder re-scores text queries only")
    started = time.perf_counter()
    _, files = load_kb(name)
    if image is not None or like is not None:
        query_vector = _image_vector(files, image, like)
    mask = _allowed(files, filters)
    depth = max(k, 50) if (mode == "hybrid" or rerank) else k
    ranked: dict[str, list[int]] = {}
    q = None
    if mode in ("dense", "hybrid"):
        q = query_vector
        if q is None:
            q = get_embedder(files.manifest["config"]["embedder"]).embed([query])[0]
        ranked["dense"] = _dense(files, np.asarray(q, dtype="float32"), depth, mask)
    if mode in ("bm25", "hybrid"):
        ranked["bm25"] = _bm25(files, query, depth, mask)
    positions = {m: {row: i + 1 for i, row in enumerate(rows)} for m, rows in ranked.items()}
    if mode == "hybrid":
        scored = rrf([ranked["dense"], ranked["bm25"]])
    elif mode == "dense":
        assert q is not None
        scored = [(r, float(np.dot(files.vectors[r], q))) for r in ranked["dense"]]
    else:
        bm = files.keyword.scores(query)
        scored = [(r, float(bm[r])) for r in ranked["bm25"]]
    if rerank and scored:
        scored = _rerank(rerank, query, files, [r for r, _ in scored[: max(k * 4, 20)]])
    results = [
        _hit(files, row, score, {m: p[row] for m, p in positions.items() if row in p})
        for row, score in scored[:k]
    ]
    return {
        "kb": name,
        "version": files.version,
        "mode": mode,
        "results": results,
        "timings_ms": {"total": round((time.perf_counter() - started) * 1000, 2)},
    }
