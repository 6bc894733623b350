"""Per-prediction explanation latency on the quickstart churn model: aifab vs shap used directly.

One scratch workspace holds the churn model (the quickstart pipeline runs once in it). Each
side explains one request record at a time, on the same 8 background rows, with torch's
thread settings as a server has them (``--threads N`` pins N for the whole process):

* ``predict``: the served handler's ``predict`` on the record (the floor: encoding the raw
  record through the feature transform and one model run);
* ``aifab``: ``ShapleyExplainer``: exact Shapley values of the 8 raw features
  (256 coalitions x 8 background rows, one batched model run);
* ``shap``: ``shap.KernelExplainer`` on the encoded inputs (321 columns), as one would wire
  shap by hand, with ``nsamples=512`` (its default here would be 2,690 model rows).

Reported: p50/p95 per record and the ratio shap/aifab. Goal: aifab p50 <= 20 ms.

    .venv/bin/python bench/explain.py            # ~1.5 min the first time, ~30 s after
    .venv/bin/python bench/explain.py --records 50
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _timed(fn: Callable[[Any], Any], items: list[Any], warmup: int = 3) -> list[float]:
    for item in items[:warmup]:
        fn(item)
    out = []
    for item in items:
        t0 = time.perf_counter()
        fn(item)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def _row(name: str, ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=20)
    return f"{name:<10} p50 {statistics.median(ms):8.2f} ms   p95 {q[18]:8.2f} ms   n={len(ms)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=30, help="records explained per side")
    parser.add_argument("--home", default=None, help="workspace (default: a temporary one)")
    parser.add_argument("--threads", type=int, default=0, help="pin torch threads (0: as is)")
    args = parser.parse_args()
    home = Path(args.home or tempfile.mkdtemp(prefix="aifab-bench-explain-"))
    os.environ["AIFAB_HOME"] = str(home)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from aifab.track.registry import resolve_model

    try:
        resolve_model("churn@champion")
    except Exception:  # noqa: BLE001 - not trained in this workspace yet
        from aifab.pipeline.runner import run_pipeline

        print("training the quickstart churn model (once per workspace)...", flush=True)
        run_pipeline(ROOT / "examples" / "quickstart" / "pipeline.yaml")
    from aifab.ops.explain.explainers import ShapleyExplainer
    from aifab.ops.explain.model import load_tabular

    model = load_tabular("churn@champion")
    records = (model.test_records * 4)[: args.records]
    print(
        f"model {model.ref}: {len(model.columns)} raw features, "
        f"{model.x_background.shape[1]} encoded columns, {len(model.background)} background rows"
    )
    explainer = ShapleyExplainer()
    predict = _timed(lambda r: model.handler.predict([r]), records)
    ours = _timed(lambda r: explainer.explain(model, [r]), records)

    import shap

    def f(x: np.ndarray) -> np.ndarray:
        return model.proba_x(x)

    kernel = shap.KernelExplainer(f, model.x_background)
    encode = model.handler.encode_inputs

    def theirs(r: dict[str, Any]) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return kernel.shap_values(encode([r])["x"], nsamples=512, silent=True)

    baseline = _timed(theirs, records[: max(5, args.records // 3)], warmup=1)
    print(_row("predict", predict))
    print(_row("aifab", ours))
    print(_row("shap", baseline))
    p50_ours, p50_theirs = statistics.median(ours), statistics.median(baseline)
    overhead = p50_ours - statistics.median(predict)
    print(
        f"ratio shap/aifab (p50): {p50_theirs / p50_ours:.1f}x; "
        f"aifab explain overhead over predict (p50): {overhead:.2f} ms; "
        f"goal p50 <= 20 ms: {'met' if p50_ours <= 20 else 'missed'}"
    )


if __name__ == "__main__":
    main()
