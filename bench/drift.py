"""aifab's drift report vs Evidently's DataDriftPreset vs scipy per column, on the same data.

Mixed tables (70% numerical columns, 30% categorical), the current sample shifted in a known
third of the columns. Each engine runs in a fresh process (peak RSS is per process): wall time
(median of --repeats for aifab and scipy; Evidently once, it takes long; every engine first
runs on 1,000 rows so imports and set-up are not timed),
peak RSS above the data's own, and agreement of per-column drift flags with Evidently (and
with the shifted columns). Evidently runs only up to --evidently-max-cells (rows x columns).

    python bench/drift.py                          # 100k and 1M rows x 20 and 100 columns
    python bench/drift.py --rows 100000 --cols 20  # one size
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.evidently_compat


def make_data(
    rows: int, cols: int, seed: int = 0
) -> tuple[dict[str, Any], dict[str, Any], dict[str, str], set[str]]:
    """Reference and current columns (numpy / pandas-categorical-ready), kinds, shifted columns."""
    rng = np.random.default_rng(seed)
    ref: dict[str, Any] = {}
    cur: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    shifted = set()
    for j in range(cols):
        name = f"c{j:03d}"
        shift = j % 3 == 0
        if j % 10 < 7:
            kinds[name] = "numerical"
            ref[name] = rng.normal(0, 1, rows)
            cur[name] = rng.normal(0.3 if shift else 0.0, 1, rows)
        else:
            kinds[name] = "categorical"
            k = 8
            p = np.full(k, 1 / k)
            q = np.array([0.3] + [0.7 / (k - 1)] * (k - 1)) if shift else p
            ref[name] = rng.choice(k, rows, p=p).astype(np.int32)
            cur[name] = rng.choice(k, rows, p=q).astype(np.int32)
        if shift:
            shifted.add(name)
    return ref, cur, kinds, shifted


def _rss_mb(field: str = "VmRSS:") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return 0.0


def _aifab(ref: dict[str, Any], cur: dict[str, Any], kinds: dict[str, str]) -> dict[str, bool]:
    import pyarrow as pa

    from aifab.ops.drift import DriftOptions, drift_report

    cats = [f"v{i}" for i in range(8)]

    def col(v: np.ndarray, kind: str) -> pa.Array:
        if kind == "numerical":
            return pa.array(v)
        return pa.DictionaryArray.from_arrays(pa.array(v), pa.array(cats))

    rep = drift_report(
        {k: col(v, kinds[k]) for k, v in ref.items()},
        {k: col(v, kinds[k]) for k, v in cur.items()},
        DriftOptions(kinds=kinds),
    )
    return {k: c["drift"] for k, c in rep["columns"].items()}


def _scipy(ref: dict[str, Any], cur: dict[str, Any], kinds: dict[str, str]) -> dict[str, bool]:
    """The floor: scipy per column with the same tests and thresholds, nothing shared."""
    from scipy import stats
    from scipy.spatial import distance

    out = {}
    for k in ref:
        r, c = ref[k], cur[k]
        if kinds[k] == "numerical":
            out[k] = bool(stats.wasserstein_distance(r, c) / max(np.std(r), 1e-3) >= 0.1)
        else:
            n = max(r.max(), c.max()) + 1
            rp = np.bincount(r, minlength=n) / len(r)
            cp = np.bincount(c, minlength=n) / len(c)
            out[k] = bool(distance.jensenshannon(rp, cp) >= 0.1)
    return out


def _evidently(ref: dict[str, Any], cur: dict[str, Any], kinds: dict[str, str]) -> dict[str, bool]:
    import pandas as pd
    from tests.evidently_compat import evidently_drift_flags

    cats = np.array([f"v{i}" for i in range(8)], dtype=object)
    num = [k for k in kinds if kinds[k] == "numerical"]
    cat = [k for k in kinds if kinds[k] == "categorical"]
    rdf = pd.DataFrame({k: (ref[k] if k in num else cats[ref[k]]) for k in ref})
    cdf = pd.DataFrame({k: (cur[k] if k in num else cats[cur[k]]) for k in cur})
    return evidently_drift_flags(rdf, cdf, num, cat)


ENGINES = {"aifab": _aifab, "scipy": _scipy, "evidently": _evidently}


def _child(engine: str, rows: int, cols: int, repeats: int, q: Any) -> None:
    ref, cur, kinds, _ = make_data(rows, cols)
    fn = ENGINES[engine]
    small = {k: v[:1000] for k, v in ref.items()}
    fn(small, {k: v[:1000] for k, v in cur.items()}, kinds)  # imports and first-call set-up
    Path("/proc/self/clear_refs").write_text("5")  # peak RSS from here on (Linux >= 4.0)
    base = _rss_mb()
    times = []
    flags: dict[str, bool] = {}
    for _ in range(repeats):
        t = time.perf_counter()
        flags = fn(ref, cur, kinds)
        times.append(time.perf_counter() - t)
    peak = _rss_mb("VmHWM:")
    q.put({"times": times, "flags": flags, "peak_mb": max(peak - base, 0.0)})


def run(engine: str, rows: int, cols: int, repeats: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(engine, rows, cols, repeats, q))
    p.start()
    out: dict[str, Any] = q.get()
    p.join()
    t = out["times"]
    out["wall_s"] = statistics.median(t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, nargs="*", default=[100_000, 1_000_000])
    ap.add_argument("--cols", type=int, nargs="*", default=[20, 100])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--evidently-max-cells", type=float, default=1e7)
    ap.add_argument("--no-scipy", action="store_true", help="Skip the scipy floor (slow at 1M).")
    args = ap.parse_args()
    for rows in args.rows:
        for cols in args.cols:
            _, _, _, shifted = make_data(min(rows, 10), cols)
            engines = ("aifab",) if args.no_scipy else ("aifab", "scipy")
            res = {k: run(k, rows, cols, args.repeats) for k in engines}
            if rows * cols <= args.evidently_max_cells:
                res["evidently"] = run("evidently", rows, cols, 1)
            truth = {f"c{j:03d}": f"c{j:03d}" in shifted for j in range(cols)}
            line: dict[str, Any] = {"rows": rows, "cols": cols}
            for k, r in res.items():
                line[f"{k}_s"] = round(r["wall_s"], 3)
                line[f"{k}_peak_mb"] = round(r["peak_mb"], 1)
                line[f"{k}_flags_right"] = f"{sum(r['flags'][c] == truth[c] for c in truth)}/{cols}"
            if "evidently" in res:
                ev = res["evidently"]["flags"]
                line["aifab_agrees_with_evidently"] = (
                    f"{sum(res['aifab']['flags'][c] == ev[c] for c in ev)}/{len(ev)}"
                )
                line["speedup_vs_evidently"] = round(
                    res["evidently"]["wall_s"] / res["aifab"]["wall_s"], 1
                )
            if "scipy" in res:
                line["speedup_vs_scipy"] = round(res["scipy"]["wall_s"] / res["aifab"]["wall_s"], 2)
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
