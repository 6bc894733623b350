"""Export: torch vs ONNX Runtime float32 vs ONNX Runtime int8 on the same classifiers.

Two models from one quickstart run in a scratch workspace: the churn MLP the pipeline registers
(~50k parameters) and a larger MLP trained by the classify recipe on the same data and features
(hidden 1024-1024-512, a few MB of weights, so size ratios mean something). Each is exported
with ``export_model`` (onnx and onnx-int8); the three contenders then run the model's encoded
test rows at batch 1 and batch 256 with the same thread count, alternating order, median of
repeats. Reported: latency and its ratio to torch, file size and its ratio to the torch weights,
accuracy on the test split and the change in points. Goals: ORT >= 1.3x faster than torch; int8
size <= 0.3x with <= 1 point accuracy loss.

    .venv/bin/python bench/export.py --threads 1 --repeats 200
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
LARGE_HIDDEN = [1024, 1024, 512]


def setup_models() -> list[str]:
    """Run the quickstart, train the larger MLP on its data; return both model refs."""
    from aifab.pipeline.runner import run_pipeline
    from aifab.train.recipes.classify import main as classify

    run_pipeline(EXAMPLES / "quickstart" / "pipeline.yaml")
    classify(
        {
            "dataset": "customers_split",
            "label": "label",
            "features": "customers_features",
            "epochs": 30,
            "batch_size": 64,
            "seed": 7,
            "model": {"name": "mlp", "config": {"hidden": LARGE_HIDDEN}},
            "experiment": "bench-export",
            "register": "churn-large",
            "system_metrics": False,
            "progress": False,
        }
    )
    return ["churn@champion", "churn-large@1"]


def encoded_test_rows(ref: str) -> tuple[Any, dict[str, np.ndarray], list[str], list[str]]:
    """The torch module, the encoded test rows (the serving path), labels and classes."""
    from aifab.inference.classifier import ClassifierHandler
    from aifab.inference.evaluation import test_split
    from aifab.models.checkpoint import load_model
    from aifab.track.registry import download_model

    model_dir = download_model(ref)
    module, sidecar = load_model(model_dir)
    records, labels = test_split(model_dir, sidecar)
    handler = ClassifierHandler()
    handler.setup(model_dir, sidecar, {"backend": "torch", "max_request_items": len(records)})
    wanted = handler.input_columns
    checked = handler.decode({"records": [{c: r.get(c) for c in wanted} for r in records]})
    return module, handler.encode_inputs(checked), labels, handler.classes


def timed(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median milliseconds per call of each function; calls interleave so drift hits all."""
    for fn in fns.values():
        for _ in range(5):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in samples.items()}


def bench_model(ref: str, threads: int, repeats: int) -> list[dict[str, Any]]:
    """Export ``ref`` twice and time torch, ORT fp32 and ORT int8 at batch 1 and 256."""
    import torch

    from aifab.inference.export import export_model, fixed_batch
    from aifab.inference.onnx_export import torch_logits
    from aifab.inference.onnx_runtime import OrtModel

    reports = {
        fmt: export_model(ref, fmt, batch_size=256, repeats=20, threads=threads)
        for fmt in ("onnx", "onnx-int8")
    }
    module, inputs, labels, classes = encoded_test_rows(ref)
    torch.set_num_threads(threads)
    runners: dict[str, Callable[[dict[str, np.ndarray]], np.ndarray]] = {
        "torch": lambda b: torch_logits(module, b),
        "ort fp32": OrtModel(Path(reports["onnx"]["path"]) / "model.onnx", threads=threads),
        "ort int8": OrtModel(Path(reports["onnx-int8"]["path"]) / "model.onnx", threads=threads),
    }
    truth, names = np.asarray(labels), np.asarray(classes)
    latency = {}
    for batch in (1, 256):
        rows = fixed_batch(inputs, batch)
        calls = {k: (lambda f=f, rows=rows: f(rows)) for k, f in runners.items()}
        latency[batch] = timed(calls, repeats if batch == 1 else max(10, repeats // 10))
    torch_size = reports["onnx"]["torch_size_bytes"]
    sizes = {
        "torch": torch_size,
        "ort fp32": reports["onnx"]["size_bytes"],
        "ort int8": reports["onnx-int8"]["size_bytes"],
    }
    rows_out = []
    base_acc = None
    for name, fn in runners.items():
        acc = float(np.mean(names[fn(inputs).argmax(axis=1)] == truth))
        base_acc = acc if base_acc is None else base_acc
        rows_out.append(
            {
                "model": ref,
                "contender": name,
                "b1_ms": latency[1][name],
                "b1_x": latency[1]["torch"] / latency[1][name],
                "b256_ms": latency[256][name],
                "b256_x": latency[256]["torch"] / latency[256][name],
                "size": sizes[name],
                "size_x": sizes[name] / torch_size,
                "acc": acc,
                "delta_pts": (acc - base_acc) * 100,
            }
        )
    return rows_out


def main() -> None:
    """Set up the models, run the contenders and print one table with the ratios."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--threads", type=int, default=1, help="torch and ORT intra-op threads")
    ap.add_argument("--repeats", type=int, default=200, help="timed calls at batch 1")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["AIFAB_HOME"] = home
        os.environ["AIFAB_ACTOR"] = "user:bench"
        for name in ("AIFAB_DB_URL", "AIFAB_TRACKING_URI", "AIFAB_CHECKPOINT_DIR"):
            os.environ.pop(name, None)
        import onnxruntime
        import torch

        print(
            f"python {sys.version.split()[0]}  torch {torch.__version__}  onnxruntime "
            f"{onnxruntime.__version__}  cpus {os.cpu_count()}  threads {args.threads}"
        )
        t0 = time.perf_counter()
        refs = setup_models()
        print(f"setup (quickstart pipeline + larger MLP): {time.perf_counter() - t0:.0f} s")
        rows = [r for ref in refs for r in bench_model(ref, args.threads, args.repeats)]
    header = (
        f"{'model':16} {'contender':9} {'b1 ms':>8} {'x torch':>8} {'b256 ms':>8} "
        f"{'x torch':>8} {'size B':>10} {'x torch':>8} {'accuracy':>9} {'delta pts':>9}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['model']:16} {r['contender']:9} {r['b1_ms']:>8.4f} {r['b1_x']:>8.2f} "
            f"{r['b256_ms']:>8.3f} {r['b256_x']:>8.2f} {r['size']:>10,} {r['size_x']:>8.3f} "
            f"{r['acc']:>9.4f} {r['delta_pts']:>+9.2f}"
        )


if __name__ == "__main__":
    main()
