"""Embedding drift: distance between mean vectors and a domain classifier on the vectors.

``mean_distance`` compares the mean current vector with the mean reference vector (cosine or
euclidean); unless a threshold is configured, drift starts at the 95th percentile of the
same distance between two bootstrap samples of the reference sized like the real pair (as
Evidently's ``distance(bootstrap=True)`` does). ``domain_classifier`` trains a logistic
regression on the standardised vectors. :func:`embed_texts` turns a text column into vectors
with a local embedding model (the one function here that loads a model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from aifab.ops.drift.domain import fit_domain

__all__ = [
    "DISTANCES",
    "EMBEDDING_TESTS",
    "domain_classifier",
    "embed_texts",
    "mean_distance",
    "vectors",
]

#: Tests an embedding column can run (``DriftOptions.embedding_tests``).
EMBEDDING_TESTS = ("mean_distance", "domain_classifier")
DISTANCES = ("cosine", "euclidean")
#: Bootstrap draws behind ``mean_distance``'s default threshold.
BOOTSTRAP = 100
QUANTILE = 0.95


def _vector(v: Any) -> np.ndarray | None:
    if v is None or isinstance(v, str | bytes):
        return None
    try:
        arr = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return arr if arr.ndim == 1 and arr.size and np.isfinite(arr).all() else None


def vectors(values: Any, dim: int | None = None) -> tuple[np.ndarray, int, int]:
    """``(rows, dim)`` float64 matrix of the usable vectors, missing count, dimension.

    A row is missing when it is None, not a list of finite numbers, or of another length than
    ``dim`` (default: the most common length among the rows).
    """
    if isinstance(values, pa.Array | pa.ChunkedArray):
        values = values.to_pylist()
    rows = [_vector(v) for v in values]
    if dim is None:
        sizes = [r.size for r in rows if r is not None]
        dim = max(set(sizes), key=sizes.count) if sizes else 0
    good = [r for r in rows if r is not None and r.size == dim]
    matrix = np.vstack(good) if good else np.empty((0, dim))
    return matrix, len(rows) - len(good), dim


def _distance(a: np.ndarray, b: np.ndarray, metric: str) -> np.ndarray:
    """Row-wise distance of ``a (n, d)`` and ``b (n, d)``."""
    if metric == "euclidean":
        return np.linalg.norm(a - b, axis=1)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = np.einsum("ij,ij->i", a, b)
    return 1.0 - np.divide(dots, norms, out=np.ones_like(dots), where=norms > 0)


def mean_distance(
    ref: np.ndarray, cur: np.ndarray, *, metric: str = "cosine", seed: int = 0
) -> tuple[float, float]:
    """Distance between the mean vectors, and the reference's bootstrap threshold.

    The threshold is the :data:`QUANTILE` of distances between the means of two samples
    drawn with replacement from the reference, of sizes ``n_ref^2/(n_ref+n_cur)`` and
    ``n_cur*n_ref/(n_ref+n_cur)``: what chance alone gives at these sample sizes.
    """
    value = float(_distance(ref.mean(axis=0)[None], cur.mean(axis=0)[None], metric)[0])
    n_ref, n_cur = len(ref), len(cur)
    size_a = max(1, n_ref * n_ref // (n_ref + n_cur))
    size_b = max(1, n_cur * n_ref // (n_ref + n_cur))
    rng = np.random.default_rng(seed)
    a = np.stack([ref[rng.integers(0, n_ref, size_a)].mean(axis=0) for _ in range(BOOTSTRAP)])
    b = np.stack([ref[rng.integers(0, n_ref, size_b)].mean(axis=0) for _ in range(BOOTSTRAP)])
    threshold = float(np.quantile(_distance(a, b, metric), QUANTILE))
    return value, threshold


def domain_classifier(ref: np.ndarray, cur: np.ndarray, *, seed: int = 0) -> dict[str, Any]:
    """Held-out AUC of a classifier telling ``cur`` vectors from ``ref`` vectors.

    Returns:
        ``{"value": auc, "p_value", "n_train", "n_test"}`` or ``{"skipped": reason}``.
    """
    try:
        fit = fit_domain(np.vstack([ref, cur]), len(ref), seed=seed, scale=True)
    except ValueError as exc:
        return {"skipped": f"too few vectors for a classifier: {exc}"}
    return {"value": fit.auc, "p_value": fit.p_value, "n_train": fit.n_train, "n_test": fit.n_test}


def embed_texts(items: Sequence[str], model: str) -> list[list[float]]:
    """Vectors of ``items`` from the local embedding model ``model`` (loaded once a process).

    Raises:
        InvalidInputError: the model cannot load or is not an embedding model.
    """
    from aifab.core.errors import InvalidInputError
    from aifab.inference.loading import shared_model

    handler = shared_model(model).handler
    if getattr(handler, "kind", None) != "embeddings":
        raise InvalidInputError(f"embedding_model {model!r} is not an embedding model")
    out: list[list[float]] = []
    for i in range(0, len(items), 256):
        # The model refuses empty strings; a space embeds as "no content".
        out.extend(handler.predict([t or " " for t in items[i : i + 256]]))
    return out
