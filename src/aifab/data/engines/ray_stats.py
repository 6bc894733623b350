"""Global statistics over a Ray dataset, as distributed aggregations.

Means, exact quantiles (DuckDB's ``quantile_cont``/``median``) and modes.

Quantiles are exact, not sketched, with memory bounded on every node: each block returns a
histogram of its values (with each bin's min and max); the driver sums them, finds the bin
holding each wanted rank and, while that bin is still large, refines inside it with another
pass; the few values of the final bin are gathered and sorted. Uniform data needs one
histogram pass, a pass to gather; heavy ties end early (a bin whose min equals its max).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from aifab.data.engines import blocks

BINS = 4096
#: A bin with at most this many values is gathered to the driver instead of refined.
GATHER_MAX = 1 << 20
Path_ = tuple[tuple[float, float, int, int], ...]


def _one_row(**values: Any) -> pa.Table:
    return pa.table({k: [v] for k, v in values.items()})


def _summary(block: pa.Table, column: str) -> pa.Table:
    v = blocks.numeric_values(block, column)
    nan = np.isnan(v)
    finite = v[~nan]
    return _one_row(
        n=len(finite),
        nan=int(nan.sum()),
        total=float(math.fsum(finite)) if len(finite) else 0.0,
        lo=float(finite.min()) if len(finite) else math.inf,
        hi=float(finite.max()) if len(finite) else -math.inf,
    )


def _collect(ds: Any, fn: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """Apply ``fn`` (block -> small table) to every block; the rows of all results."""
    out = ds.map_batches(fn, batch_size=None, batch_format="pyarrow", fn_kwargs=kwargs)
    rows: list[dict[str, Any]] = []
    for b in out.iter_batches(batch_size=None, batch_format="pyarrow"):
        rows.extend(b.to_pylist())
    return rows


def summary(ds: Any, column: str) -> dict[str, Any]:
    """Count of non-null finite values, of NaNs, their exact sum (fsum), min and max."""
    rows = _collect(ds, _summary, column=column)
    return {
        "n": sum(r["n"] for r in rows),
        "nan": sum(r["nan"] for r in rows),
        "total": math.fsum(r["total"] for r in rows),
        "lo": min((r["lo"] for r in rows), default=math.inf),
        "hi": max((r["hi"] for r in rows), default=-math.inf),
    }


def mean(ds: Any, column: str) -> float | None:
    """The mean of the non-null values (None if there are none), summed exactly."""
    s = summary(ds, column)
    if s["n"] + s["nan"] == 0:
        return None
    return math.nan if s["nan"] else s["total"] / s["n"]


def _histograms(block: pa.Table, column: str, levels: list[Any]) -> pa.Table:
    v = blocks.numeric_values(block, column)
    v = v[~np.isnan(v)]
    out: dict[str, list[Any]] = {"level": [], "counts": [], "mins": [], "maxs": []}
    for i, (path, lo, hi) in enumerate(levels):
        vals = np.sort(v[blocks.in_path(v, path)])
        vals = vals[(vals >= lo) & (vals <= hi)]
        b = blocks.bin_of(vals, lo, hi, BINS)
        counts = np.bincount(b, minlength=BINS)
        starts = np.searchsorted(b, np.arange(BINS), side="left")
        ends = np.searchsorted(b, np.arange(BINS), side="right") - 1
        has = counts > 0
        mins = np.where(has, vals[np.minimum(starts, len(vals) - 1)] if len(vals) else 0.0, np.inf)
        maxs = np.where(has, vals[np.maximum(ends, 0)] if len(vals) else 0.0, -np.inf)
        out["level"].append(i)
        out["counts"].append(counts.tolist())
        out["mins"].append(mins.tolist())
        out["maxs"].append(maxs.tolist())
    return pa.table(out)


def _gather(block: pa.Table, column: str, paths: list[Any]) -> pa.Table:
    v = blocks.numeric_values(block, column)
    v = v[~np.isnan(v)]
    return pa.table(
        {"level": list(range(len(paths))), "values": [v[blocks.in_path(v, p)] for p in paths]}
    )


def _order_stats(ds: Any, column: str, ranks: Sequence[int], lo: float, hi: float) -> dict:
    """The values of the given 0-based ranks among the finite values of ``column``."""
    found: dict[int, float] = {}
    # Each open rank: (refinement path so far, range of the next histogram, rank inside it).
    open_: dict[int, tuple[Path_, float, float, int]] = {r: ((), lo, hi, r) for r in ranks}
    to_gather: dict[int, tuple[Path_, int]] = {}
    while open_:
        levels = sorted({(p, a, b) for p, a, b, _ in open_.values()})
        rows = _collect(ds, _histograms, column=column, levels=levels)
        merged = []
        for i, _ in enumerate(levels):
            mine = [r for r in rows if r["level"] == i]
            counts = np.sum([r["counts"] for r in mine], axis=0)
            mins = np.min([r["mins"] for r in mine], axis=0)
            maxs = np.max([r["maxs"] for r in mine], axis=0)
            merged.append((counts, mins, maxs))
        still: dict[int, tuple[Path_, float, float, int]] = {}
        for rank, (path, a, b, inner) in open_.items():
            counts, mins, maxs = merged[levels.index((path, a, b))]
            cum = np.cumsum(counts)
            k = int(np.searchsorted(cum, inner, side="right"))
            inner -= int(cum[k - 1]) if k else 0
            deeper = (*path, (a, b, BINS, k))
            if mins[k] == maxs[k]:
                found[rank] = float(mins[k])
            elif counts[k] <= GATHER_MAX:
                to_gather[rank] = (deeper, inner)
            else:
                still[rank] = (deeper, float(mins[k]), float(maxs[k]), inner)
        open_ = still
    if to_gather:
        paths = sorted({p for p, _ in to_gather.values()})
        rows = _collect(ds, _gather, column=column, paths=paths)
        values = [
            np.sort(np.concatenate([[], *(r["values"] for r in rows if r["level"] == i)]))
            for i in range(len(paths))
        ]
        for rank, (p, inner) in to_gather.items():
            found[rank] = float(values[paths.index(p)][inner])
    return found


def _interpolate(lo: float, hi: float, d: float) -> float:
    """DuckDB's ``lo * (1 - d) + hi * d`` as its build computes it.

    That is one fused multiply-add (``fma(1 - d, lo, hi * d)``), emulated exactly so the
    result matches to the last bit.
    """
    from fractions import Fraction

    if not (math.isfinite(lo) and math.isfinite(hi)):
        return lo * (1 - d) + hi * d
    return float(Fraction(1 - d) * Fraction(lo) + Fraction(hi * d))


def quantiles(ds: Any, column: str, qs: Sequence[float]) -> list[float | None]:
    """DuckDB's ``quantile_cont(column, q)`` for each q, exactly (None when all are null)."""
    s = summary(ds, column)
    n, total = s["n"], s["n"] + s["nan"]
    if total == 0:
        return [None for _ in qs]
    wanted: list[tuple[int, int, float]] = []
    for q in qs:
        h = (total - 1) * q
        lo_rank, hi_rank = math.floor(h), math.ceil(h)
        wanted.append((lo_rank, hi_rank, h - lo_rank))
    ranks = sorted({r for lo, hi, _ in wanted for r in (lo, hi) if r < n})
    values = _order_stats(ds, column, ranks, s["lo"], s["hi"]) if ranks else {}
    out: list[float | None] = []
    for lo_rank, hi_rank, frac in wanted:
        lo_v = values.get(lo_rank, math.nan)
        hi_v = values.get(hi_rank, math.nan)
        out.append(lo_v if lo_rank == hi_rank else _interpolate(lo_v, hi_v, frac))
    return out


def mode(ds: Any, column: str, rn: str) -> Any:
    """DuckDB's ``mode(column)``, as a distributed group-by.

    The most frequent non-null value; ties go to the value seen first (smallest row number).
    """
    from ray.data.aggregate import Count, Min

    kept = ds.map_batches(
        blocks.non_null,
        batch_size=None,
        batch_format="pyarrow",
        fn_kwargs={"columns": [column, rn]},
    )
    groups = kept.groupby(column).aggregate(Count(), Min(rn))
    best: tuple[int, int] | None = None
    value = None
    for b in groups.iter_batches(batch_size=None, batch_format="pyarrow"):
        for row in b.to_pylist():
            key = (-row["count()"], row[f"min({rn})"])
            if best is None or key < best:
                best, value = key, row[column]
    return value
