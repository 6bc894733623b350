"""``export_model``: a registered classifier -> ONNX, int8 ONNX or a Triton model repository.

Each export is checked against the torch model it came from (size, latency on one batch at the
same thread count, largest logit difference, accuracy on the model's test split), reported in
``report.json`` beside the files, and attached to the model version in the registry.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from aifab.core.atomic import atomic_write_text
from aifab.core.errors import ConflictError, InvalidInputError, NotFoundError
from aifab.core.workspace import get_workspace
from aifab.inference.evaluation import test_split
from aifab.inference.onnx_export import (
    CLASSIFIERS,
    quantize_int8,
    sample_inputs,
    to_onnx,
    torch_logits,
)
from aifab.inference.onnx_runtime import OrtModel
from aifab.inference.triton import write_repository
from aifab.models.checkpoint import WEIGHTS, load_model, read_sidecar
from aifab.track.registry import attach_export, download_model, resolve_model

__all__ = ["FORMATS", "export_model"]

FORMATS = ("onnx", "onnx-int8", "triton")
REPORT = "report.json"
_EVAL_BATCH = 1024


def export_model(
    ref: str,
    fmt: str,
    *,
    out_dir: Path | None = None,
    attach: bool = True,
    batch_size: int = 64,
    repeats: int = 20,
    threads: int | None = None,
    max_batch_size: int = 256,
) -> dict[str, Any]:
    """Export model version ``ref`` as ``fmt`` and report how the export compares to torch.

    Args:
        ref: ``NAME@VERSION`` or ``NAME@ALIAS`` of a classifier (mlp, cnn,
            transformer-classifier).
        fmt: ``onnx`` (float32), ``onnx-int8`` (dynamically quantized) or ``triton`` (a model
            repository: ``<out>/<name>/config.pbtxt`` + ``<out>/<name>/1/model.onnx``).
        out_dir: Where the files go (default ``<workspace>/exports/<name>/v<version>/<fmt>``);
            an earlier export there is replaced.
        attach: Log the files to the version's run and tag the version (``aifab.export.<fmt>``).
        batch_size: Rows of the batch timed for the latency figures.
        repeats: Timed runs of that batch (the median is reported).
        threads: Threads for both torch and onnxruntime (default: torch's current setting).
        max_batch_size: Triton's ``max_batch_size``.

    Returns:
        The report: ``model``, ``format``, ``path``, ``files``, ``size_bytes``,
        ``torch_size_bytes``, ``size_ratio``, ``latency_ms`` ({torch, exported}), ``speedup``,
        ``max_abs_diff``, ``accuracy`` ({torch, exported, delta} or None without test rows),
        plus ``test_rows``, ``latency_batch``, ``threads``, ``notes`` (why accuracy is missing)
        and ``artifact_uri`` (when attached).

    Raises:
        InvalidInputError: an unknown format, a model that is not an exportable classifier,
            missing or corrupt model files, or bad numeric options.
        NotFoundError: the model version does not exist.
        ConflictError: ``out_dir`` holds something other than an earlier export.
    """
    if fmt not in FORMATS:
        raise InvalidInputError(f"format {fmt!r}: use one of {', '.join(FORMATS)}")
    numbers = {"batch_size": batch_size, "repeats": repeats, "max_batch_size": max_batch_size}
    for name, value in numbers.items():
        if value < 1:
            raise InvalidInputError(f"{name}: must be at least 1, got {value}")
    mv = resolve_model(ref)
    model_ref = f"{mv['name']}@{mv['version']}"
    model_dir = download_model(model_ref)
    builder = str(read_sidecar(model_dir).get("builder"))
    if builder not in CLASSIFIERS:
        raise InvalidInputError(
            f"model {model_ref} is a {builder}: export supports classifiers "
            f"({', '.join(CLASSIFIERS)})"
        )
    module, sidecar = load_model(model_dir)
    default_dir = get_workspace().exports / mv["name"] / f"v{mv['version']}" / fmt
    target = Path(out_dir).absolute() if out_dir else default_dir
    notes: list[str] = []
    records, labels = _test_rows(model_dir, sidecar, notes)
    inputs = _encode(model_dir, sidecar, records, notes) if records else None
    if inputs is None:
        records, labels = [], []
        inputs = sample_inputs(sidecar, 8)
    staging = _staging_dir(target)
    try:
        triton = {
            "name": mv["name"],
            "max_batch_size": max_batch_size,
            "classes": _classes(sidecar),
        }
        onnx_file = _write_format(fmt, module, inputs, staging, triton)
        assets = onnx_file.parent.parent if fmt == "triton" else staging
        _copy_assets(model_dir, assets)
        n_threads = threads or _torch_threads()
        ort_model = OrtModel(onnx_file, threads=n_threads)
        timing = {"batch_size": batch_size, "repeats": repeats, "threads": n_threads}
        report = {
            "model": model_ref,
            "format": fmt,
            "path": str(target),
            **_sizes(onnx_file, model_dir, sidecar),
            **_compare(module, ort_model, inputs, labels, _classes(sidecar), **timing),
            "notes": notes,
        }
        report["files"] = sorted(
            [str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file()] + [REPORT]
        )
        _write_report(staging / REPORT, report)
        _publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    # "path" and the file list describe the published directory from here on.
    if attach:
        report["artifact_uri"] = attach_export(model_ref, target, fmt)
        _write_report(target / REPORT, report)
    return report


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def _classes(sidecar: Mapping[str, Any]) -> list[str]:
    pre = (sidecar.get("meta") or {}).get("preprocess") or {}
    return [str(c) for c in pre.get("classes") or []]


def _test_rows(
    model_dir: Path, sidecar: Mapping[str, Any], notes: list[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The test split, or nothing (and a note why) when it cannot be read here."""
    try:
        records, labels = test_split(model_dir, sidecar)
    except (InvalidInputError, NotFoundError) as exc:
        # The export is still useful; the report just has no accuracy figures.
        notes.append(f"no accuracy: {exc.message}")
        return [], []
    if not records:
        notes.append("no accuracy: the test split has no rows")
    return records, labels


def _encode(
    model_dir: Path, sidecar: Mapping[str, Any], records: list[dict[str, Any]], notes: list[str]
) -> dict[str, np.ndarray] | None:
    """Model inputs of raw records, through the serving path: ``decode`` then ``encode_inputs``.

    Serving encodes exactly as training did, so these are the inputs the test metrics came from.
    """
    from aifab.inference.classifier import ClassifierHandler

    handler = ClassifierHandler()
    handler.setup(model_dir, sidecar, {"backend": "torch", "max_request_items": len(records)})
    # A request carries only the model's input columns; the dataset may hold others.
    wanted = handler.input_columns
    try:
        checked = handler.decode({"records": [{c: r.get(c) for c in wanted} for r in records]})
    except InvalidInputError as exc:  # e.g. NULLs training imputed but serving refuses
        notes.append(f"no accuracy: test rows do not decode as requests: {exc.message}")
        return None
    return handler.encode_inputs(checked)


def _staging_dir(target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))


def _write_format(
    fmt: str,
    module: Any,
    inputs: Mapping[str, np.ndarray],
    staging: Path,
    triton: Mapping[str, Any],
) -> Path:
    """Write the format's files under ``staging``; return the ONNX file that runs."""
    if fmt == "onnx":
        return to_onnx(module, inputs, staging / "model.onnx")
    if fmt == "onnx-int8":
        fp32 = to_onnx(module, inputs, staging / ".fp32.onnx")
        out = quantize_int8(fp32, staging / "model.onnx", calibration=inputs)
        fp32.unlink()
        return out
    root = staging / str(triton["name"])
    fp32 = to_onnx(module, inputs, root / "1" / "model.onnx")
    write_repository(
        root, fp32, max_batch_size=int(triton["max_batch_size"]), classes=triton["classes"]
    )
    return fp32


def _copy_assets(model_dir: Path, dest: Path) -> None:
    """Copy what turns raw rows into inputs (sidecar, feature transform, tokenizer) beside."""
    for src in model_dir.iterdir():
        if src.is_file() and src.name != WEIGHTS:
            shutil.copy2(src, dest / src.name)


def _sizes(onnx_file: Path, model_dir: Path, sidecar: Mapping[str, Any]) -> dict[str, Any]:
    size = onnx_file.stat().st_size
    weights = model_dir / str(sidecar.get("weights") or WEIGHTS)
    torch_size = weights.stat().st_size
    return {
        "size_bytes": size,
        "torch_size_bytes": torch_size,
        "size_ratio": round(size / torch_size, 4),
    }


def _in_batches(
    fn: Callable[[dict[str, np.ndarray]], np.ndarray], inputs: Mapping[str, np.ndarray]
) -> np.ndarray:
    n = len(next(iter(inputs.values())))
    parts = [
        fn({k: v[i : i + _EVAL_BATCH] for k, v in inputs.items()}) for i in range(0, n, _EVAL_BATCH)
    ]
    return np.concatenate(parts)


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


def fixed_batch(inputs: Mapping[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """``rows`` rows of ``inputs`` (its first rows, repeated when it has fewer)."""
    return {k: np.resize(v, (rows, *v.shape[1:])) for k, v in inputs.items()}


def _compare(
    module: Any,
    ort_model: OrtModel,
    inputs: Mapping[str, np.ndarray],
    labels: list[str],
    classes: list[str],
    batch_size: int,
    repeats: int,
    threads: int,
) -> dict[str, Any]:
    """Latency, largest logit difference and accuracy of torch vs the export."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ref = _in_batches(lambda b: torch_logits(module, b), inputs)
        got = _in_batches(ort_model, inputs)
        batch = fixed_batch(inputs, batch_size)
        t_torch = median_ms(lambda: torch_logits(module, batch), repeats)
        t_ort = median_ms(lambda: ort_model(batch), repeats)
    finally:
        torch.set_num_threads(previous)
    accuracy = None
    if labels and classes:
        truth = np.asarray(labels)
        names = np.asarray(classes)
        a_torch = float(np.mean(names[ref.argmax(axis=1)] == truth))
        a_export = float(np.mean(names[got.argmax(axis=1)] == truth))
        accuracy = {
            "torch": round(a_torch, 6),
            "exported": round(a_export, 6),
            "delta": round(a_export - a_torch, 6),
        }
    return {
        "latency_ms": {"torch": round(t_torch, 4), "exported": round(t_ort, 4)},
        "speedup": round(t_torch / t_ort, 3) if t_ort > 0 else None,
        "max_abs_diff": float(np.max(np.abs(ref - got))) if ref.size else 0.0,
        "accuracy": accuracy,
        "test_rows": len(labels),
        "latency_batch": batch_size,
        "threads": threads,
    }


def _write_report(path: Path, report: Mapping[str, Any]) -> None:
    atomic_write_text(path, json.dumps(report, indent=2, sort_keys=True) + "\n")


def _publish(staging: Path, target: Path) -> None:
    """Move the finished export into place, replacing an earlier export (never other files)."""
    if target.exists():
        earlier = target.is_dir() and (not any(target.iterdir()) or (target / REPORT).is_file())
        if not earlier:
            raise ConflictError(f"{target} exists and is not an export directory; not replacing it")
        old = target.with_name(f".{target.name}.old-{os.getpid()}-{time.monotonic_ns()}")
        os.replace(target, old)
        os.replace(staging, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, target)
