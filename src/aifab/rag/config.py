"""A knowledge base's settings: chunking, embedder and index (validated at the edge)."""

from __future__ import annotations

from pydantic import Field, model_validator

from aifab.core.config import StrictConfig
from aifab.rag.embedders import DEFAULT_EMBEDDER

__all__ = ["KBConfig"]


class KBConfig(StrictConfig):
    """How a knowledge base chunks, embeds and indexes its documents."""

    embedder: str = Field(
        DEFAULT_EMBEDDER,
        description="Embedding model: builtin:all-minilm-l6-v2, NAME@VERSION, a model dir, or "
        "an OpenAI-compatible base URL#model.",
    )
    chunk_tokens: int = Field(160, ge=8, le=4096, description="Tokens per chunk.")
    chunk_overlap: int = Field(32, ge=0, le=2048, description="Tokens shared by neighbours.")
    index: str = Field("faiss", description="Vector index backend.")
    hnsw_threshold: int = Field(
        50_000, ge=1, description="Exact search below this many chunks, HNSW from there."
    )
    hnsw_m: int = Field(32, ge=4, le=128, description="HNSW neighbours per node.")
    hnsw_ef_search: int = Field(96, ge=8, le=4096, description="HNSW search breadth.")

    @model_validator(mode="after")
    def _overlap_fits(self) -> KBConfig:
        if self.chunk_overlap > self.chunk_tokens // 2:
            raise ValueError(
                f"chunk_overlap {self.chunk_overlap} must be at most half of chunk_tokens "
                f"({self.chunk_tokens})"
            )
        return self
