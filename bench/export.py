"""Export: torch vs ONNX Runtime float32 vs ONNX Runtime int8 on the same classifiers.

Two models from one quickstart run in a scratch workspace: the churn MLP the pipeline registers
(~50k parameters) and a larger MLP trained by the classify recipe on the same data and features
(hidden 1024-1024-512, a few MB of weights, so size ratios mean something). Each is exported
with ``export_model`` (onnx and onnx-int8). Two tables, each at batch 1 and batch 256 with the
same thread count on every side, alternating order, median of repeats:

- the network alone: torch vs ORT on the model's encoded test rows (the exported network
  without its preprocessing), with file size and accuracy;
- raw records -> probabilities: aifab's serving handler (decode, fitted transform, torch,
  softmax) vs the self-contained export (the transform in the ONNX graph), fp32 and int8.

Goals: ORT >= 1.3x faster than torch; int8 size <= 0.3x with <= 1 point accuracy loss.

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


def network_files(ref: str, inputs: dict[str, np.ndarray], scratch: Path) -> dict[str, Path]:
    """The model's network alone (no preprocessing) as fp32 and int8 ONNX files."""
    from aifab.inference.onnx_export import quantize_int8, to_onnx
    from aifab.models.checkpoint import load_model
    from aifab.track.registry import download_model

    module, _ = load_model(download_model(ref))
    fp32 = to_onnx(module, inputs, scratch / "fp32.onnx")
    return {"fp32": fp32, "int8": quantize_int8(fp32, scratch / "int8.onnx", calibration=inputs)}


def bench_model(
    ref: str, threads: int, repeats: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Export ``ref`` twice; time the network alone and the raw-record path at batch 1 and 256."""
    import torch

    from aifab.inference.export import export_model
    from aifab.inference.onnx_export import torch_logits
    from aifab.inference.onnx_runtime import OrtModel

    reports = {
        fmt: export_model(ref, fmt, batch_size=256, repeats=5, threads=threads)
        for fmt in ("onnx", "onnx-int8")
    }
    module, inputs, labels, classes = encoded_test_rows(ref)
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as scratch:
        files = network_files(ref, inputs, Path(scratch))
        runners: dict[str, Callable[[dict[str, np.ndarray]], np.ndarray]] = {
            "torch": lambda b: torch_logits(module, b),
            "ort fp32": OrtModel(files["fp32"], threads=threads),
            "ort int8": OrtModel(files["int8"], threads=threads),
        }
        truth, names = np.asarray(labels), np.asarray(classes)
        latency = {}
        for batch in (1, 256):
            rows = {k: np.resize(v, (batch, *v.shape[1:])) for k, v in inputs.items()}
            calls = {k: (lambda f=f, rows=rows: f(rows)) for k, f in runners.items()}
            latency[batch] = timed(calls, repeats if batch == 1 else max(10, repeats // 10))
        torch_size = reports["onnx"]["torch_size_bytes"]
        sizes = {"torch": torch_size, **{f"ort {k}": p.stat().st_size for k, p in files.items()}}
        accuracy = {
            k: float(np.mean(names[f(inputs).argmax(axis=1)] == truth)) for k, f in runners.items()
        }
    network = [
        {
            "model": ref,
            "contender": name,
            "b1_ms": latency[1][name],
            "b1_x": latency[1]["torch"] / latency[1][name],
            "b256_ms": latency[256][name],
            "b256_x": latency[256]["torch"] / latency[256][name],
            "size": sizes[name],
            "size_x": sizes[name] / torch_size,
            "acc": accuracy[name],
            "delta_pts": (accuracy[name] - accuracy["torch"]) * 100,
        }
        for name in runners
    ]
    return network, bench_raw(ref, reports, threads, repeats)


def bench_raw(
    ref: str, reports: dict[str, dict[str, Any]], threads: int, repeats: int
) -> list[dict[str, Any]]:
    """Raw records -> probabilities: aifab's handler vs the self-contained exports."""
    from aifab.inference.classifier import SMALL_BATCH_ROWS, ClassifierHandler
    from aifab.inference.evaluation import test_split
    from aifab.inference.export_check import handler_runner, onnx_runner
    from aifab.inference.onnx_features import preprocess_graph
    from aifab.track.registry import download_model

    model_dir = download_model(ref)
    sidecar = read_json(model_dir / "aifab-model.json")
    handler = ClassifierHandler()
    handler.setup(model_dir, sidecar, {"backend": "torch"})
    records, _ = test_split(model_dir, sidecar)
    records = [{c: r.get(c) for c in handler.input_columns} for r in records]
    fields = preprocess_graph(model_dir, sidecar).fields
    out = []
    latency = {}
    for batch in (1, 256):
        rows = [records[i % len(records)] for i in range(batch)]
        n = 1 if batch <= SMALL_BATCH_ROWS else threads  # the handler's own choice
        runs = {"aifab handler": handler_runner(handler)}
        for fmt, label in (("onnx", "onnx fp32"), ("onnx-int8", "onnx int8")):
            path = Path(reports[fmt]["path"]) / "model.onnx"
            runs[label] = onnx_runner(path, n, fields=fields, handler=handler)
        calls = {k: (lambda f=f, rows=rows: f(rows)) for k, f in runs.items()}
        latency[batch] = timed(calls, repeats if batch == 1 else max(10, repeats // 10))
    for name in latency[1]:
        out.append(
            {
                "model": ref,
                "contender": name,
                "b1_ms": latency[1][name],
                "b1_x": latency[1]["aifab handler"] / latency[1][name],
                "b256_ms": latency[256][name],
                "b256_x": latency[256]["aifab handler"] / latency[256][name],
            }
        )
    return out


def read_json(path: Path) -> dict[str, Any]:
    """A JSON file's content."""
    import json

    return dict(json.loads(path.read_text(encoding="utf-8")))


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
        results = [bench_model(ref, args.threads, args.repeats) for ref in refs]
    print("network alone, encoded test rows -> logits")
    header = (
        f"{'model':16} {'contender':9} {'b1 ms':>8} {'x torch':>8} {'b256 ms':>8} "
        f"{'x torch':>8} {'size B':>10} {'x torch':>8} {'accuracy':>9} {'delta pts':>9}"
    )
    print(header)
    for r in (r for network, _ in results for r in network):
        print(
            f"{r['model']:16} {r['contender']:9} {r['b1_ms']:>8.4f} {r['b1_x']:>8.2f} "
            f"{r['b256_ms']:>8.3f} {r['b256_x']:>8.2f} {r['size']:>10,} {r['size_x']:>8.3f} "
            f"{r['acc']:>9.4f} {r['delta_pts']:>+9.2f}"
        )
    print("raw records -> probabilities (the ONNX graph holds the feature transform)")
    print(
        f"{'model':16} {'contender':13} {'b1 ms':>8} {'x aifab':>8} {'b256 ms':>8} {'x aifab':>8}"
    )
    for r in (r for _, raw in results for r in raw):
        print(
            f"{r['model']:16} {r['contender']:13} {r['b1_ms']:>8.4f} {r['b1_x']:>8.2f} "
            f"{r['b256_ms']:>8.3f} {r['b256_x']:>8.2f}"
        )


if __name__ == "__main__":
    main()
