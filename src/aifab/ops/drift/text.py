"""Text drift, pure: a TF-IDF domain classifier with its top words, and cheap descriptors.

The classifier (``domain_classifier``) learns to tell current texts from reference texts; its
held-out ROC AUC is the drift score and its heaviest words say what changed. Descriptors
(``descriptors``: length in characters, share of words outside the reference's vocabulary,
share of characters that are not letters) are numbers per text that the drift report then
compares with its numerical tests. Both sides are sampled to at most ``max_rows`` texts with
a fixed seed, so a report is reproducible.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from aifab.ops.drift.domain import DomainFit, fit_domain

__all__ = ["DESCRIPTORS", "TEXT_TESTS", "descriptors", "domain_classifier", "sample", "texts"]

#: Tests a text column can run (``DriftOptions.text_tests``).
TEXT_TESTS = ("domain_classifier", "descriptors")
#: Numbers per text compared by the numerical tests, as ``<column>.<descriptor>``.
DESCRIPTORS = ("length", "oov_share", "non_letter_share")
#: Characters of one text the classifier reads (a 1 MB text costs no more than this).
MAX_CHARS = 5000
_WORD = re.compile(r"(?u)\b\w\w+\b")


def texts(values: Any) -> tuple[list[str], int]:
    """Non-missing values as text, and how many were missing (None, NaN)."""
    if isinstance(values, pa.Array | pa.ChunkedArray):
        values = values.to_pylist()
    out = [v if isinstance(v, str) else str(v) for v in values if v is not None and v == v]
    return out, len(values) - len(out)


def sample(items: Sequence[str], n: int, seed: int) -> list[str]:
    """At most ``n`` of ``items``, drawn without replacement with ``seed`` (order kept)."""
    if len(items) <= n:
        return list(items)
    pick = np.sort(np.random.default_rng(seed).choice(len(items), size=n, replace=False))
    return [items[i] for i in pick]


def _vectorize(ref: list[str], cur: list[str]) -> tuple[Any, Any]:
    """TF-IDF of ``ref + cur`` and the vectorizer; character n-grams when no words exist.

    Scripts without spaces and texts of symbols only still get features from n-grams.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer

    docs = [t[:MAX_CHARS] for t in (*ref, *cur)]
    words = TfidfVectorizer(sublinear_tf=True, max_features=50_000, dtype=np.float32)
    try:
        return words.fit_transform(docs), words
    except ValueError:  # empty vocabulary: no word of two or more letters anywhere
        chars = TfidfVectorizer(
            analyzer="char_wb", ngram_range=(1, 3), sublinear_tf=True, dtype=np.float32
        )
        try:
            return chars.fit_transform(docs), chars
        except ValueError:  # every text is empty
            return None, None


def domain_classifier(
    ref: list[str], cur: list[str], *, seed: int = 0, top_words: int = 10
) -> dict[str, Any]:
    """Train a classifier to tell ``cur`` from ``ref``; its held-out AUC and top words.

    Fitting the vocabulary on both sides leaks no label: TF-IDF is unsupervised.

    Returns:
        ``{"value": auc, "p_value", "n_train", "n_test", "words": {"current": [...],
        "reference": [...]}}`` or ``{"skipped": reason}`` when it cannot be trained.
    """
    x, vectorizer = _vectorize(ref, cur)
    if x is None:
        return {"skipped": "every text is empty"}
    try:
        fit: DomainFit = fit_domain(x, len(ref), seed=seed)
    except ValueError as exc:
        return {"skipped": f"too few texts for a classifier: {exc}"}
    coef = np.asarray(fit.model.coef_[0])
    names = vectorizer.get_feature_names_out()
    order = np.argsort(coef, kind="stable")
    current = [str(names[i]) for i in order[::-1][:top_words] if coef[i] > 0]
    reference = [str(names[i]) for i in order[:top_words] if coef[i] < 0]
    return {
        "value": fit.auc,
        "p_value": fit.p_value,
        "n_train": fit.n_train,
        "n_test": fit.n_test,
        "words": {"current": current, "reference": reference},
    }


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text[:MAX_CHARS].lower())


def _oov(items: list[str], vocab: set[str]) -> np.ndarray:
    """Share of each text's words outside ``vocab`` (NaN for a text without words)."""
    out = np.full(len(items), np.nan)
    for i, text in enumerate(items):
        words = _tokens(text)
        if words:
            out[i] = sum(w not in vocab for w in words) / len(words)
    return out


def _non_letters(items: list[str]) -> np.ndarray:
    """Share of each text's characters that are not letters (NaN for an empty text)."""
    out = np.full(len(items), np.nan)
    for i, text in enumerate(items):
        head = text[:MAX_CHARS]
        if head:
            out[i] = 1.0 - sum(ch.isalpha() for ch in head) / len(head)
    return out


def descriptors(
    ref: list[str], cur: list[str], *, seed: int = 0
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Descriptor -> (reference values, current values), ready for the numerical tests.

    The out-of-vocabulary share of reference texts is measured against the vocabulary of the
    *other* half of the reference (against its own it would always be 0).
    """
    rng = np.random.default_rng(seed)
    half = rng.permutation(len(ref))
    vocab_side = [ref[i] for i in half[: len(ref) // 2]]
    held_out = [ref[i] for i in half[len(ref) // 2 :]]
    vocab = {w for t in vocab_side for w in _tokens(t)}
    return {
        "length": (
            np.fromiter((len(t) for t in ref), np.float64, len(ref)),
            np.fromiter((len(t) for t in cur), np.float64, len(cur)),
        ),
        "oov_share": (_oov(held_out, vocab), _oov(cur, vocab)),
        "non_letter_share": (_non_letters(ref), _non_letters(cur)),
    }
