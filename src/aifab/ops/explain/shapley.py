"""Shapley values of raw features, pure numpy: coalitions, their weights, and the masking game.

A coalition keeps some raw features of the explained record and takes the rest from a
background record. Each raw feature owns the encoded columns that change when it alone is
swapped, so one encoding call prices every coalition: the model then runs on one stacked
matrix. Up to :data:`EXACT_MAX` features every coalition is evaluated (exact); beyond,
sampled permutations estimate them (unbiased, and the values still sum to the output change).
"""

from __future__ import annotations

from functools import lru_cache
from math import factorial

import numpy as np

__all__ = ["EXACT_MAX", "coalitions", "masked_inputs", "owners"]

EXACT_MAX = 10
#: Permutations sampled per record above :data:`EXACT_MAX` features.
PERMUTATIONS = 16


@lru_cache(maxsize=16)
def _exact(m: int) -> tuple[np.ndarray, np.ndarray]:
    masks = ((np.arange(1 << m)[:, None] >> np.arange(m)) & 1).astype(bool)
    sizes = masks.sum(axis=1)
    weight = np.array([factorial(s) * factorial(m - s - 1) / factorial(m) for s in range(m)])
    w = np.zeros((m, 1 << m))
    for i in range(m):
        without = ~masks[:, i]
        idx = np.nonzero(without)[0]
        w[i, idx] -= weight[sizes[idx]]
        w[i, idx | (1 << i)] += weight[sizes[idx]]
    return masks, w


def _sampled(m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    masks = np.zeros((PERMUTATIONS * (m + 1), m), dtype=bool)
    w = np.zeros((m, PERMUTATIONS * (m + 1)))
    order = np.arange(m)
    for p in range(PERMUTATIONS):
        # Antithetic pairs: every other permutation is the previous one reversed.
        order = rng.permutation(m) if p % 2 == 0 else order[::-1]
        base = p * (m + 1)
        for t, feature in enumerate(order):
            masks[base + t + 1] = masks[base + t]
            masks[base + t + 1, feature] = True
            w[feature, base + t + 1] += 1.0 / PERMUTATIONS
            w[feature, base + t] -= 1.0 / PERMUTATIONS
    return masks, w


def coalitions(m: int, rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Coalition masks ``(n, m)`` and the matrix ``W (m, n)`` with ``phi = W @ v(masks)``.

    Exact for ``m <= EXACT_MAX``; sampled permutations otherwise.
    """
    if m <= EXACT_MAX:
        return _exact(m)
    return _sampled(m, rng or np.random.default_rng(0))


def owners(x_record: np.ndarray, x_swapped: np.ndarray) -> np.ndarray:
    """Which raw feature owns each encoded column (-1: none).

    Args:
        x_record: the explained record's encoded row ``(cols,)``.
        x_swapped: ``(m, cols)``: row ``i`` is the record with raw feature ``i`` taken from
            the background row.
    """
    changed = x_swapped != x_record[None, :]
    owner = np.where(changed.any(axis=0), changed.argmax(axis=0), -1)
    return owner


def masked_inputs(
    x_record: np.ndarray, x_background: np.ndarray, owner: np.ndarray, masks: np.ndarray
) -> np.ndarray:
    """Encoded inputs of every coalition: owned columns from the record where kept.

    Columns no single feature owns keep the record's values.
    """
    keep = np.ones((masks.shape[0], x_record.shape[0]), dtype=bool)
    owned = owner >= 0
    keep[:, owned] = masks[:, owner[owned]]
    return np.where(keep, x_record[None, :], x_background[None, :])
