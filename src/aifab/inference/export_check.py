"""Checking an export against aifab's own serving path, like for like.

Both sides go from raw records to class probabilities: aifab's classifier handler (decode,
encode with the fitted transform, torch, softmax: what ``/v1/predict`` runs) and the export
(the self-contained graph fed the records' fields, or aifab's encoder + the exported network
where the preprocessing stays outside the graph). Latency is timed on the same rows, at the
same batch sizes, with the same thread count on both sides.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from aifab.inference.onnx_features import RawField

__all__ = ["Runner", "compare", "feeds", "handler_runner", "median_ms", "onnx_runner"]

#: Raw records -> ``(rows, classes)`` float64 probabilities.
Runner = Callable[[list[dict[str, Any]]], np.ndarray]
_EVAL_BATCH = 1024


def feeds(fields: Sequence[RawField], records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The graph inputs of ``records``: strings (``""`` for a missing one) or float32."""
    out: dict[str, Any] = {}
    for f in fields:
        values = [r.get(f.name) for r in records]
        if f.type == "string":
            out[f.name] = np.array(["" if v is None else str(v) for v in values], dtype=object)
        else:
            out[f.name] = np.array(values, dtype=np.float32)
    return out


def _probabilities(rows: list[dict[str, Any]], classes: Sequence[str]) -> np.ndarray:
    return np.array([[p["probabilities"][c] for c in classes] for p in rows], dtype=np.float64)


def handler_runner(handler: Any) -> Runner:
    """The serving path: ``decode`` then ``predict`` (encode, forward, softmax)."""

    def run(records: list[dict[str, Any]]) -> np.ndarray:
        rows = handler.predict(handler.decode({"records": records}))
        return _probabilities(rows, handler.classes)

    return run


def onnx_runner(
    path: Path, threads: int, *, fields: Sequence[RawField] | None, handler: Any
) -> Runner:
    """The export: its ``probabilities`` output for raw records.

    Args:
        path: The exported ONNX file (with the probabilities head).
        threads: onnxruntime intra-op threads.
        fields: The graph's raw inputs, or None when the graph takes encoded inputs (then
            ``handler`` checks and encodes the records first, as Triton's Python step does).
        handler: The set-up classifier handler.
    """
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = max(1, threads), 1
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

    def run(records: list[dict[str, Any]]) -> np.ndarray:
        if fields is not None:
            feed = feeds(fields, records)
        else:
            feed = handler.encode_inputs(handler.decode({"records": records}))
        return np.asarray(session.run(["probabilities"], feed)[0], dtype=np.float64)

    return run


def median_ms(fn: Callable[[], Any], repeats: int, warmup: int = 3) -> float:
    """Median wall time of ``fn()`` in milliseconds over ``repeats`` runs after warm-up."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _in_batches(run: Runner, records: list[dict[str, Any]]) -> np.ndarray:
    parts = [run(records[i : i + _EVAL_BATCH]) for i in range(0, len(records), _EVAL_BATCH)]
    return np.concatenate(parts)


def compare(
    handler_run: Runner,
    exported: Callable[[int], Runner],
    records: list[dict[str, Any]],
    labels: list[str],
    classes: list[str],
    *,
    batches: Sequence[int],
    repeats: int,
    threads: Callable[[int], int],
) -> dict[str, Any]:
    """Largest probability difference, accuracy and latency of the handler vs the export.

    Args:
        handler_run: aifab's serving path.
        exported: The export's runner for a thread count.
        records: Raw test records (request fields only).
        labels: Their true classes.
        classes: Class names in output order.
        batches: Batch sizes timed (rows repeated when there are fewer records).
        repeats: Timed runs per batch (the median is reported).
        threads: The thread count the handler uses at a batch size (the export gets the same).
    """
    ref = _in_batches(handler_run, records)
    got = _in_batches(exported(threads(_EVAL_BATCH)), records)
    latency: dict[str, dict[str, Any]] = {}
    for rows in batches:
        batch = [records[i % len(records)] for i in range(rows)]
        n = threads(rows)
        run = exported(n)
        t_handler = median_ms(partial(handler_run, batch), repeats)
        t_export = median_ms(partial(run, batch), repeats)
        latency[str(rows)] = {
            "handler_ms": round(t_handler, 4),
            "exported_ms": round(t_export, 4),
            "speedup": round(t_handler / t_export, 3) if t_export > 0 else None,
            "threads": n,
        }
    names = np.asarray(classes)
    truth = np.asarray(labels)
    a_ref = float(np.mean(names[ref.argmax(axis=1)] == truth))
    a_got = float(np.mean(names[got.argmax(axis=1)] == truth))
    return {
        "compared": "probabilities",
        "max_abs_diff": float(np.max(np.abs(ref - got))),
        "accuracy": {
            "handler": round(a_ref, 6),
            "exported": round(a_got, 6),
            "delta": round(a_got - a_ref, 6),
        },
        "latency": latency,
    }
