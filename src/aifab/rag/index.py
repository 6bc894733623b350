"""Dense vector indexes: a ``Protocol`` plus a registry by name (``faiss`` is the default).

Inner product over unit vectors (= cosine). Row ``i`` of the index is chunk ``i`` of the KB
version. Exact search (``IndexFlatIP``) below ``hnsw_threshold`` vectors, HNSW above.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from aifab.core.atomic import atomic_path
from aifab.core.registry import Registry

__all__ = ["INDEXES", "FaissIndex", "VectorIndex"]


class VectorIndex(Protocol):
    """A searchable set of vectors addressed by row number."""

    kind: str

    def add(self, vectors: np.ndarray) -> None:
        """Append rows (their ids continue from ``len(self)``)."""

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(scores, rows)`` of shape ``(len(queries), k)``; missing hits have row -1."""

    def save(self, path: Path) -> None:
        """Write the index to ``path`` atomically."""

    def __len__(self) -> int: ...


class FaissIndex:
    """faiss: ``flat`` (exact inner product) or ``hnsw`` (graph, approximate, much faster).

    Args:
        dimension: vector size.
        kind: ``flat`` or ``hnsw``.
        m: HNSW neighbours per node.
        ef_construction: HNSW build breadth.
        ef_search: HNSW search breadth (recall vs speed).
    """

    def __init__(
        self,
        dimension: int,
        kind: str = "flat",
        *,
        m: int = 32,
        ef_construction: int = 80,
        ef_search: int = 64,
        index: Any = None,
    ) -> None:
        import faiss

        self.dimension = dimension
        self.kind = kind
        if index is not None:
            self.index = index
        elif kind == "hnsw":
            self.index = faiss.IndexHNSWFlat(dimension, m, faiss.METRIC_INNER_PRODUCT)
            self.index.hnsw.efConstruction = ef_construction
        else:
            self.index = faiss.IndexFlatIP(dimension)
        if kind == "hnsw":
            self.index.hnsw.efSearch = ef_search

    def __len__(self) -> int:
        return int(self.index.ntotal)

    def add(self, vectors: np.ndarray) -> None:
        """Append rows."""
        if len(vectors):
            self.index.add(np.ascontiguousarray(vectors, dtype="float32"))

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` rows by inner product."""
        k = max(1, min(k, len(self))) if len(self) else 1
        if not len(self):
            n = len(queries)
            return np.zeros((n, 1), "float32"), np.full((n, 1), -1, "int64")
        scores, rows = self.index.search(np.ascontiguousarray(queries, dtype="float32"), k)
        return scores, rows

    def save(self, path: Path) -> None:
        """Write with ``faiss.write_index`` to a temp file, then rename."""
        import faiss

        with atomic_path(path) as tmp:
            faiss.write_index(self.index, str(tmp))

    @classmethod
    def load(cls, path: Path, kind: str, ef_search: int = 64) -> FaissIndex:
        """Read an index written by :meth:`save`."""
        import faiss

        index = faiss.read_index(str(path))
        return cls(index.d, kind, index=index, ef_search=ef_search)

    @classmethod
    def build(cls, vectors: np.ndarray, hnsw_threshold: int, **options: Any) -> FaissIndex:
        """An index over ``vectors``: exact below ``hnsw_threshold`` rows, HNSW from there."""
        kind = "hnsw" if len(vectors) >= hnsw_threshold else "flat"
        index = cls(int(vectors.shape[1]), kind, **options)
        index.add(vectors)
        return index


#: Vector index backends by name.
INDEXES = Registry("vector index", {"faiss": "aifab.rag.index:FaissIndex"})
