"""Drift tests as a Protocol plus a registry by name: PSI, KS, chi-square, JS, Wasserstein.

Each test reads a :class:`ColumnPair` (reference and current values of one column, prepared once:
sorted finite floats for numerical columns, aligned category counts for categorical ones) and
returns one number; ``higher_is_drift`` says which way its threshold points. Pure numpy/scipy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from aifab.core.registry import Registry

__all__ = ["DRIFT_TESTS", "ColumnPair", "DriftTest", "auto_test"]

Kind = Literal["numerical", "categorical"]
_EPS = 1e-4


@dataclass
class ColumnPair:
    """One column's reference and current values, ready for the tests.

    Numerical columns hold sorted finite float64 arrays; categorical ones hold the category
    counts of both sides aligned on the union of categories (reference order first).
    """

    kind: Kind
    ref_sorted: np.ndarray | None = None
    cur_sorted: np.ndarray | None = None
    ref_counts: np.ndarray | None = None
    cur_counts: np.ndarray | None = None

    @property
    def n_ref(self) -> int:
        """Reference values (missing ones excluded)."""
        if self.kind == "numerical":
            assert self.ref_sorted is not None
            return len(self.ref_sorted)
        assert self.ref_counts is not None
        return int(self.ref_counts.sum())

    @property
    def n_cur(self) -> int:
        """Current values (missing ones excluded)."""
        if self.kind == "numerical":
            assert self.cur_sorted is not None
            return len(self.cur_sorted)
        assert self.cur_counts is not None
        return int(self.cur_counts.sum())

    @cached_property
    def n_unique(self) -> int:
        """Distinct values over both sides."""
        if self.kind == "categorical":
            assert self.ref_counts is not None
            return len(self.ref_counts)
        both = np.concatenate([self.ref_sorted, self.cur_sorted])
        return len(np.unique(both)) if len(both) < 64 else _unique_sorted_union(self)

    @cached_property
    def counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Counts per distinct value (categories, or a numerical column's exact values)."""
        if self.kind == "categorical":
            assert self.ref_counts is not None and self.cur_counts is not None
            return self.ref_counts, self.cur_counts
        assert self.ref_sorted is not None and self.cur_sorted is not None
        keys = np.unique(np.concatenate([np.unique(self.ref_sorted), np.unique(self.cur_sorted)]))
        return _sorted_hist(self.ref_sorted, keys), _sorted_hist(self.cur_sorted, keys)


def _unique_sorted_union(pair: ColumnPair) -> int:
    ref, cur = pair.ref_sorted, pair.cur_sorted
    assert ref is not None and cur is not None
    # Sorted arrays: distinct values are where a value differs from the one before it.
    ur = ref[np.r_[True, ref[1:] != ref[:-1]]] if len(ref) else ref
    uc = cur[np.r_[True, cur[1:] != cur[:-1]]] if len(cur) else cur
    if len(ur) + len(uc) > 10_000:
        return len(ur) + len(uc)  # only compared with small cut-offs (5, 20)
    return len(np.union1d(ur, uc))


def _sorted_hist(sorted_values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Occurrences of each key in a sorted array."""
    left = np.searchsorted(sorted_values, keys, side="left")
    right = np.searchsorted(sorted_values, keys, side="right")
    return (right - left).astype(np.float64)


def _bin_counts(sorted_values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``np.histogram`` counts of a sorted array (last bin closed), by binary search."""
    idx = np.searchsorted(sorted_values, edges[:-1], side="left")
    idx = np.append(idx, np.searchsorted(sorted_values, edges[-1], side="right"))
    return np.diff(idx).astype(np.float64)


@runtime_checkable
class DriftTest(Protocol):
    """One statistical comparison of a reference and a current sample."""

    #: Registry name.
    name: str
    #: True: drift when the value is >= the threshold (a distance); False: when < (a p-value).
    higher_is_drift: bool
    default_threshold: float

    def __call__(self, pair: ColumnPair) -> float:
        """The test's statistic or p-value for one column."""


@dataclass(frozen=True)
class _Test:
    name: str
    higher_is_drift: bool
    default_threshold: float


class PSI(_Test):
    """Population stability index over 10 reference-quantile bins (categories as they are)."""

    def __call__(self, pair: ColumnPair) -> float:
        if pair.kind == "numerical":
            ref, cur = pair.ref_sorted, pair.cur_sorted
            assert ref is not None and cur is not None
            q = ref[np.linspace(0, len(ref) - 1, 11).astype(int)]
            edges = np.unique(np.concatenate([[-np.inf], q[1:-1], [np.inf]]))
            r, c = _bin_counts(ref, edges), _bin_counts(cur, edges)
        else:
            r, c = pair.counts
        rp = np.maximum(r / max(r.sum(), 1.0), _EPS)
        cp = np.maximum(c / max(c.sum(), 1.0), _EPS)
        return float(np.sum((cp - rp) * np.log(cp / rp)))


class KS(_Test):
    """Two-sample Kolmogorov-Smirnov p-value (numerical columns)."""

    def __call__(self, pair: ColumnPair) -> float:
        from scipy.stats import ks_2samp

        if pair.kind != "numerical":
            raise ValueError("ks needs a numerical column")
        return float(ks_2samp(pair.ref_sorted, pair.cur_sorted).pvalue)


class ChiSquare(_Test):
    """Chi-square goodness-of-fit p-value of current counts against reference proportions."""

    def __call__(self, pair: ColumnPair) -> float:
        from scipy.stats import chisquare

        r, c = pair.counts
        f_exp = r * (c.sum() / max(r.sum(), 1.0))
        if np.any((f_exp == 0) & (c > 0)):
            return 0.0  # a category the reference never had: as unlikely as it gets
        keep = f_exp > 0
        if keep.sum() < 2:
            return 1.0
        return float(chisquare(c[keep], f_exp[keep]).pvalue)


class ZTest(_Test):
    """Two-proportion z-test p-value (binary columns)."""

    def __call__(self, pair: ColumnPair) -> float:
        from scipy.stats import norm

        r, c = pair.counts
        if len(r) < 2:
            return 1.0
        n1, n2 = r.sum(), c.sum()
        # Proportion of "not the first value", like Evidently's encoding.
        p1, p2 = 1.0 - r[0] / n1, 1.0 - c[0] / n2
        p = (p1 * n1 + p2 * n2) / (n1 + n2)
        denom = np.sqrt(p * (1 - p) * (1.0 / n1 + 1.0 / n2))
        if denom == 0:
            return 1.0
        return float(2 * (1 - norm.cdf(abs((p1 - p2) / denom))))


class JensenShannon(_Test):
    """Jensen-Shannon distance (base e) of the two distributions.

    Numerical columns with more than 20 distinct reference values use Sturges bins over the
    combined range; others compare exact values or categories.
    """

    def __call__(self, pair: ColumnPair) -> float:
        from scipy.spatial import distance

        if pair.kind == "numerical" and _distinct_ref(pair) > 20:
            ref, cur = pair.ref_sorted, pair.cur_sorted
            assert ref is not None and cur is not None
            lo, hi = min(ref[0], cur[0]), max(ref[-1], cur[-1])
            n_bins = int(np.ceil(np.log2(len(ref) + len(cur)) + 1))
            edges = np.linspace(lo, hi, n_bins + 1) if hi > lo else np.array([lo - 0.5, lo + 0.5])
            r, c = _bin_counts(ref, edges), _bin_counts(cur, edges)
        else:
            r, c = pair.counts
        value = distance.jensenshannon(r / r.sum(), c / c.sum())
        return float(value) if np.isfinite(value) else 0.0


def _distinct_ref(pair: ColumnPair) -> int:
    ref = pair.ref_sorted
    assert ref is not None
    if len(ref) == 0:
        return 0
    return int(np.count_nonzero(ref[1:] != ref[:-1]) + 1)


class Wasserstein(_Test):
    """First Wasserstein distance divided by the reference's standard deviation (numerical).

    Computed from the two quantile functions on a shared grid of at most 20,000 points: exact
    when both samples have the grid's size, and within a grid step of exact otherwise.
    """

    def __call__(self, pair: ColumnPair) -> float:
        ref, cur = pair.ref_sorted, pair.cur_sorted
        if pair.kind != "numerical" or ref is None or cur is None:
            raise ValueError("wasserstein needs a numerical column")
        norm = max(float(np.std(ref)), 0.001)
        if len(ref) == len(cur):
            return float(np.mean(np.abs(ref - cur)) / norm)
        k = min(max(len(ref), len(cur)), 20_000)
        u = (np.arange(k) + 0.5) / k
        qr = ref[np.minimum((u * len(ref)).astype(np.int64), len(ref) - 1)]
        qc = cur[np.minimum((u * len(cur)).astype(np.int64), len(cur) - 1)]
        return float(np.mean(np.abs(qr - qc)) / norm)


#: Drift test name -> the test object; ``auto`` picks one per column like Evidently's defaults.
DRIFT_TESTS = Registry(
    "drift test",
    {
        "psi": "aifab.ops.drift.stat_tests:psi",
        "ks": "aifab.ops.drift.stat_tests:ks",
        "chisquare": "aifab.ops.drift.stat_tests:chisquare",
        "z": "aifab.ops.drift.stat_tests:z",
        "jensenshannon": "aifab.ops.drift.stat_tests:jensenshannon",
        "wasserstein": "aifab.ops.drift.stat_tests:wasserstein",
    },
)

psi = PSI("psi", True, 0.2)
ks = KS("ks", False, 0.05)
chisquare = ChiSquare("chisquare", False, 0.05)
z = ZTest("z", False, 0.05)
jensenshannon = JensenShannon("jensenshannon", True, 0.1)
wasserstein = Wasserstein("wasserstein", True, 0.1)


def auto_test(pair: ColumnPair) -> str:
    """The test a column gets by default (Evidently's documented choice, for comparable flags).

    Up to 1,000 reference values: KS for numerical columns with more than 5 distinct values,
    chi-square for other columns with more than 2, else the z-test. Beyond 1,000: Wasserstein
    for numerical columns with more than 5 distinct values, else Jensen-Shannon.
    """
    n_unique = pair.n_unique
    if pair.n_ref <= 1000:
        if pair.kind == "numerical" and n_unique > 5:
            return "ks"
        return "chisquare" if n_unique > 2 else "z"
    if pair.kind == "numerical" and n_unique > 5:
        return "wasserstein"
    return "jensenshannon"
