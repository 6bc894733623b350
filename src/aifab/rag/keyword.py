"""Keyword search: BM25 (bm25s) over chunk texts, with aifab's own query tokenisation.

Queries are tokenised the way the corpus was and words the corpus never saw are dropped, so a
query of unknown words finds nothing instead of failing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["KeywordIndex", "tokenize"]

_WORD = re.compile(r"(?u)\b\w\w+\b")


def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


def tokenize(text: str) -> list[str]:
    """Lower-cased words of two or more characters, English stop words removed."""
    stop = _stopwords()
    return [w for w in _WORD.findall(text.lower()) if w not in stop]


class KeywordIndex:
    """A BM25 index over a list of texts (row ``i`` is chunk ``i``)."""

    def __init__(self, retriever: Any) -> None:
        self.retriever = retriever

    @classmethod
    def build(cls, texts: Sequence[str]) -> KeywordIndex:
        """Index ``texts`` (empty ones included, so rows stay aligned)."""
        import bm25s

        retriever = bm25s.BM25()
        # A placeholder token keeps texts with no words in the corpus (and rows aligned).
        corpus = [tokenize(t) or ["\x00"] for t in texts]
        retriever.index(corpus, show_progress=False)
        return cls(retriever)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every row for ``query`` (all zero when no query word is known)."""
        vocab = self.retriever.vocab_dict
        tokens = [t for t in tokenize(query) if t in vocab]
        n = int(self.retriever.scores["num_docs"])
        if not tokens:
            return np.zeros(n, dtype="float32")
        return np.asarray(self.retriever.get_scores(tokens), dtype="float32")

    def save(self, directory: Path) -> None:
        """Write the index files into ``directory`` (a fresh, not yet published folder)."""
        self.retriever.save(str(directory), show_progress=False)

    @classmethod
    def load(cls, directory: Path) -> KeywordIndex:
        """Read an index written by :meth:`save`."""
        import bm25s

        return cls(bm25s.BM25.load(str(directory), show_progress=False))
