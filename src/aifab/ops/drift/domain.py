"""The domain classifier: how well a model tells current rows from reference rows (ROC AUC).

Shared by text drift (TF-IDF features) and embedding drift (the vectors): a logistic
regression trained on half of each side and scored on the other half. An AUC near 0.5 means
the two samples look alike; its p-value is the chance a random scorer reaches that AUC on
the same held-out labels (the Mann-Whitney normal approximation of Evidently's bootstrap).
Deterministic: the split and the solver are seeded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["DEFAULT_AUC", "MIN_ROWS", "P_VALUE", "DomainFit", "fit_domain", "split"]

#: AUC at or above which a domain classifier flags drift (Evidently's ``abs`` text default).
DEFAULT_AUC = 0.55
#: ... and only if a random scorer reaches that AUC with less than this chance.
P_VALUE = 0.05
#: Fewer rows than this on either side: the classifier is not trained (reported as skipped).
MIN_ROWS = 10


@dataclass
class DomainFit:
    """A fitted domain classifier and its held-out score.

    Attributes:
        auc: ROC AUC on the held-out half (current rows are the positive class).
        p_value: chance that a random scorer reaches ``auc`` on the same held-out labels.
        n_train: rows trained on (both sides).
        n_test: rows scored (both sides).
        model: the fitted scikit-learn classifier (``coef_[0]`` > 0 points to current rows).
    """

    auc: float
    p_value: float
    n_train: int
    n_test: int
    model: Any


def split(n_ref: int, n_cur: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and test row indices into ``ref + cur``: half of each side in each (stratified)."""
    rng = np.random.default_rng(seed)
    ref_idx, cur_idx = rng.permutation(n_ref), n_ref + rng.permutation(n_cur)
    h_ref, h_cur = n_ref // 2, n_cur // 2
    train = np.concatenate([ref_idx[:h_ref], cur_idx[:h_cur]])
    test = np.concatenate([ref_idx[h_ref:], cur_idx[h_cur:]])
    return np.sort(train), np.sort(test)


def _auc_p_value(auc: float, n_pos: int, n_neg: int) -> float:
    """One-sided p-value of ``auc`` under random scores (Mann-Whitney U, normal approximation)."""
    sd = math.sqrt((n_pos + n_neg + 1) / (12.0 * n_pos * n_neg))
    return 0.5 * math.erfc((auc - 0.5) / (sd * math.sqrt(2.0)))


def fit_domain(x: Any, n_ref: int, *, seed: int = 0, scale: bool = False) -> DomainFit:
    """Train a logistic regression telling the last rows of ``x`` from its first ``n_ref``.

    Args:
        x: features of ``n_ref`` reference rows followed by the current rows (dense or sparse).
        n_ref: how many leading rows are the reference.
        seed: the split's and the solver's seed.
        scale: standardise columns first (for dense vectors of small, uneven scale).

    Raises:
        ValueError: fewer than :data:`MIN_ROWS` rows on either side.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    n_cur = x.shape[0] - n_ref
    if min(n_ref, n_cur) < MIN_ROWS:
        raise ValueError(f"{min(n_ref, n_cur)} rows on one side (< {MIN_ROWS})")
    y = np.r_[np.zeros(n_ref), np.ones(n_cur)]
    train, test = split(n_ref, n_cur, seed)
    x_train, x_test = x[train], x[test]
    if scale:
        mean, std = x_train.mean(axis=0), x_train.std(axis=0)
        std[std == 0] = 1.0
        x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    model = LogisticRegression(C=1.0, solver="liblinear", random_state=seed, max_iter=200)
    model.fit(x_train, y[train])
    score = model.decision_function(x_test)
    auc = float(roc_auc_score(y[test], score))
    n_pos = int(y[test].sum())
    return DomainFit(
        auc=auc,
        p_value=_auc_p_value(auc, n_pos, len(test) - n_pos),
        n_train=len(train),
        n_test=len(test),
        model=model,
    )
