"""Embedders: texts -> L2-normalised float32 vectors, batched; a ``Protocol`` plus a registry.

``local`` runs anything aifab can serve as an embedding model in this process (the builtin
MiniLM, a registry model, a model directory); ``onnx`` (``onnx:SOURCE``) runs such a model
exported to ONNX Runtime; ``openai`` calls an OpenAI-compatible
``/embeddings`` endpoint (an aifab server's embedding deployment, or another).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from aifab.core.errors import AifabError, ConflictError, first_line
from aifab.core.registry import Registry

__all__ = [
    "DEFAULT_EMBEDDER",
    "EMBEDDERS",
    "Embedder",
    "EmbedderUnavailable",
    "get_embedder",
    "normalise",
]

DEFAULT_EMBEDDER = "builtin:all-minilm-l6-v2"
BATCH = 64
API_KEY_ENV = "AIFAB_EMBEDDINGS_API_KEY"


class EmbedderUnavailable(ConflictError):
    """A knowledge base's embedding model cannot be loaded or reached any more."""


class Embedder(Protocol):
    """Something that embeds texts."""

    name: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dimension)`` float32, rows of unit length."""


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (float32, C-contiguous; zero rows stay zero)."""
    v = np.asarray(vectors, dtype="float32")
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    return np.ascontiguousarray(v / np.maximum(norms, 1e-12))


class LocalEmbedder:
    """A sentence-transformers model loaded through aifab's model loading."""

    def __init__(self, source: str) -> None:
        from aifab.inference.loading import load_served_model

        handler: Any = load_served_model(source).handler
        if getattr(handler, "kind", None) != "embeddings":
            raise EmbedderUnavailable(f"embedder {source!r}: not an embedding model")
        self.handler = handler
        self.name = source
        self.dimension = int(handler.dimension)
        # A dual encoder also embeds images (``data:image`` URLs) into its text space.
        self.modalities = tuple(handler.describe().get("modalities") or ("text",))

    def embed(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> Any:
        """Embed in batches of :data:`BATCH` (``progress`` gets the count done so far)."""
        out = np.zeros((len(texts), self.dimension), dtype="float32")
        for start in range(0, len(texts), BATCH):
            batch = [t or " " for t in texts[start : start + BATCH]]
            out[start : start + len(batch)] = self.handler.predict(batch)
            if progress is not None:
                progress(start + len(batch))
        return normalise(out)


class OpenAIEmbedder:
    """``POST {base}/embeddings`` of an OpenAI-compatible server (``URL#model``)."""

    def __init__(self, source: str) -> None:
        import httpx

        base, _, model = source.partition("#")
        self.base = base.rstrip("/")
        self.model = model or "default"
        self.name = source
        # The server decides: an aifab dual-encoder deployment takes ``data:image`` URLs, a
        # text-only one answers an error, reported as EmbedderUnavailable.
        self.modalities = ("text", "image")
        key = os.environ.get(API_KEY_ENV, "")
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(timeout=httpx.Timeout(60.0, connect=5.0))
        self.dimension = int(self.embed(["dimension probe"]).shape[1])

    def embed(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> Any:
        """Embed in batches of :data:`BATCH` texts per request."""
        import httpx

        rows: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            batch = [t or " " for t in texts[start : start + BATCH]]
            try:
                r = self._client.post(
                    f"{self.base}/embeddings",
                    json={"model": self.model, "input": batch},
                    headers=self._headers,
                )
                r.raise_for_status()
                data = sorted(r.json()["data"], key=lambda d: d["index"])
                rows.extend(d["embedding"] for d in data)
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                raise EmbedderUnavailable(f"embedder {self.name}: {first_line(exc)}") from None
            if progress is not None:
                progress(len(rows))
        return normalise(np.asarray(rows, dtype="float32"))


#: Embedder class per kind; :func:`get_embedder` picks the kind from the source string.
EMBEDDERS = Registry(
    "embedder",
    {
        "local": "aifab.rag.embedders:LocalEmbedder",
        "openai": "aifab.rag.embedders:OpenAIEmbedder",
        "onnx": "aifab.rag.embedders_onnx:OnnxEmbedder",
    },
)
_CACHE: dict[str, Any] = {}
_LOCK = threading.Lock()


def get_embedder(source: str = DEFAULT_EMBEDDER) -> Any:
    """The embedder for ``source``, loaded once per process.

    Raises:
        EmbedderUnavailable: the model is gone, unreadable, not an embedding model, or the
            endpoint does not answer (the message names it).
    """
    if source.startswith(("http://", "https://")):
        kind = "openai"
    else:
        kind = "onnx" if source.startswith("onnx:") else "local"
    with _LOCK:
        if source not in _CACHE:
            try:
                _CACHE[source] = EMBEDDERS.get(kind)(source)
            except EmbedderUnavailable:
                raise
            except AifabError as exc:
                raise EmbedderUnavailable(
                    f"embedding model {source!r} cannot be loaded: {exc.message}"
                ) from None
        return _CACHE[source]


def forget_embedders() -> None:
    """Drop loaded embedders (a test or a changed registry wants them reloaded)."""
    with _LOCK:
        _CACHE.clear()
