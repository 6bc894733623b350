"""``export_model``: a registered classifier -> ONNX, int8 ONNX or a Triton model repository.

Exports take raw records: the fitted feature transform is in the ONNX graph where ONNX ops
express it (``onnx_features``); where they do not, the ONNX file takes the encoded inputs and
the Triton repository is an ensemble whose Python step runs aifab's own transform. Each export
is checked against aifab's serving path on the model's test rows, raw records to probabilities
on both sides (largest difference, accuracy, latency at batch 1 and ``batch_size`` with the same
threads), reported in ``report.json`` beside the files and attached to the model version.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aifab.core.atomic import atomic_write_text
from aifab.core.errors import ConflictError, InvalidInputError, NotFoundError
from aifab.core.workspace import get_workspace
from aifab.inference.evaluation import test_split
from aifab.inference.export_check import compare, handler_runner, median_ms, onnx_runner
from aifab.inference.onnx_bundle import bundle
from aifab.inference.onnx_export import (
    CLASSIFIERS,
    quantize_int8,
    sample_inputs,
    to_onnx,
    torch_logits,
)
from aifab.inference.onnx_features import Inexpressible, Preprocess, preprocess_graph
from aifab.inference.onnx_runtime import OrtModel
from aifab.inference.triton import KINDS, write_ensemble, write_repository
from aifab.models.checkpoint import WEIGHTS, load_model, read_sidecar
from aifab.track.registry import attach_export, download_model, resolve_model

__all__ = ["FORMATS", "PREPROCESS", "TARGETS", "export_model"]

FORMATS = ("onnx", "onnx-int8", "triton")
TARGETS = tuple(KINDS)
#: auto: in the graph where ONNX expresses it; graph: there or fail; python: Triton ensemble.
PREPROCESS = ("auto", "graph", "python")
REPORT = "report.json"
#: Largest difference from the handler's probabilities an export is expected to keep: float32
#: graphs agree to rounding; int8 weights and activations move probabilities by a few points.
TOLERANCE = {"onnx": 1e-5, "onnx-int8": 0.1, "triton": 1e-5}
#: Float32 exports of models with attention: ONNX Runtime fuses attention and layer norms and
#: sums in another order, which moves probabilities by a few 1e-5 (measured 3e-5 on the fusion
#: example); 1e-4 is also what Hugging Face Optimum validates transformer exports with.
ATTENTION_TOLERANCE = 1e-4
_ATTENTION_BUILDERS = ("transformer-classifier", "fusion-classifier")


def tolerance(fmt: str, builder: str) -> float:
    """The largest probability difference an export of ``builder`` in ``fmt`` should keep."""
    if fmt != "onnx-int8" and builder in _ATTENTION_BUILDERS:
        return ATTENTION_TOLERANCE
    return TOLERANCE[fmt]


#: Exported files and directories: readable by a server running as another user.
FILE_MODE, DIR_MODE = 0o644, 0o755


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
    target: str = "cpu",
    preprocess: str = "auto",
) -> dict[str, Any]:
    """Export model version ``ref`` as ``fmt`` and report how it compares to aifab's serving.

    Args:
        ref: ``NAME@VERSION`` or ``NAME@ALIAS`` of a classifier (mlp, cnn,
            transformer-classifier).
        fmt: ``onnx`` (float32), ``onnx-int8`` (dynamically quantized) or ``triton`` (a model
            repository under ``<out>/``: ``<name>/config.pbtxt`` + ``<name>/1/model.onnx``, or
            the ``<name>`` ensemble of ``<name>_preprocess`` and ``<name>_network``).
        out_dir: Where the files go (default ``<workspace>/exports/<name>/v<version>/<fmt>``);
            an earlier export there is replaced.
        attach: Log the files to the version's run and tag the version (``aifab.export.<fmt>``).
        batch_size: The larger batch timed for the latency figures (batch 1 is timed too).
        repeats: Timed runs of each batch (the median is reported).
        threads: Threads for both torch and onnxruntime (default: torch's current setting).
        max_batch_size: Triton's ``max_batch_size``.
        target: ``cpu`` or ``gpu``: Triton's instance kind (``KIND_CPU`` / ``KIND_GPU``).
        preprocess: ``auto`` (the transform in the graph where ONNX ops express it), ``graph``
            (in the graph, or fail naming the step that cannot be) or ``python`` (Triton only:
            an ensemble with a Python-backend step running aifab's transform).

    Returns:
        The report: ``model``, ``format``, ``path``, ``files``, ``inputs`` (``raw`` or
        ``encoded``), ``preprocess`` (``graph``, ``python`` or ``aifab``), ``target``,
        ``size_bytes``, ``torch_size_bytes``, ``size_ratio``, ``latency`` (per batch size:
        handler_ms, exported_ms, speedup, threads), ``latency_ms`` and ``speedup`` (at
        ``batch_size``), ``max_abs_diff`` (probabilities), ``accuracy`` ({handler, exported,
        delta} or None without test rows), ``test_rows``, ``latency_batch``, ``threads``,
        ``notes`` and ``artifact_uri`` (when attached).

    Raises:
        InvalidInputError: an unknown format, target or preprocess choice, a model that is not
            an exportable classifier, missing or corrupt model files, bad numeric options, or
            ``preprocess="graph"`` for a transform ONNX cannot express.
        NotFoundError: the model version does not exist.
        ConflictError: ``out_dir`` holds something other than an earlier export.
    """
    _check_options(fmt, target, preprocess, batch_size, repeats, max_batch_size)
    m = _load(ref, threads or _torch_threads())
    default_dir = get_workspace().exports / m.name / f"v{m.version}" / fmt
    target_dir = Path(out_dir).absolute() if out_dir else default_dir
    notes: list[str] = []
    records, labels = _test_rows(m.dir, m.sidecar, m.handler, notes)
    pre = _preprocess(m.dir, m.sidecar, fmt, preprocess, notes)
    staging = _staging_dir(target_dir)
    try:
        kind = {"max_batch_size": max_batch_size, "kind": KINDS[target]}
        timing = {"batch_size": batch_size, "repeats": repeats, "threads": m.threads}
        onnx_file, checked = _build(m, fmt, pre, staging, records, labels, kind, timing)
        report = {
            "model": m.ref,
            "format": fmt,
            "path": str(target_dir),
            # The Triton ensemble takes raw fields too: its Python step encodes them.
            "inputs": "raw" if pre is not None or fmt == "triton" else "encoded",
            "preprocess": _preprocess_kind(fmt, pre),
            "target": target,
            **_sizes(onnx_file, m.dir, m.sidecar),
            **checked,
            "tolerance": tolerance(fmt, m.builder),
            "within_tolerance": bool(checked["max_abs_diff"] <= tolerance(fmt, m.builder)),
            "test_rows": len(labels),
            "notes": notes,
        }
        report["files"] = sorted(
            [str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file()] + [REPORT]
        )
        _write_report(staging / REPORT, report)
        _open_modes(staging)
        _publish(staging, target_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    # "path" and the file list describe the published directory from here on.
    if attach:
        report["artifact_uri"] = attach_export(m.ref, target_dir, fmt)
        _write_report(target_dir / REPORT, report)
        os.chmod(target_dir / REPORT, FILE_MODE)
    return report


@dataclass(frozen=True)
class _Model:
    """The model version being exported, loaded once."""

    ref: str
    name: str
    version: str
    dir: Path
    builder: str
    module: Any
    sidecar: Mapping[str, Any]
    handler: Any
    threads: int


def _load(ref: str, threads: int) -> _Model:
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
    return _Model(
        ref=model_ref,
        name=mv["name"],
        version=str(mv["version"]),
        dir=model_dir,
        builder=builder,
        module=module,
        sidecar=sidecar,
        handler=_handler(model_dir, sidecar, threads),
        threads=threads,
    )


def _build(
    m: _Model,
    fmt: str,
    pre: Preprocess | None,
    staging: Path,
    records: list[dict[str, Any]],
    labels: list[str],
    triton: Mapping[str, Any],
    timing: Mapping[str, int],
) -> tuple[Path, dict[str, Any]]:
    """Write the format's files under ``staging`` and check them; the file that runs, figures."""
    h = m.handler
    inputs = h.encode_inputs(h.decode({"records": records})) if records else None
    network = to_onnx(m.module, inputs or sample_inputs(m.sidecar, 8), staging / ".network.onnx")
    meta = {
        "aifab.model": m.ref,
        "aifab.builder": m.builder,
        "aifab.preprocess": _preprocess_kind(fmt, pre),
        "aifab.features": _features(m.sidecar),
    }
    spec = {**triton, "name": m.name, "assets": m.dir}
    onnx_file = _write_format(fmt, network, inputs, pre, staging, spec, h, meta)
    if fmt != "triton":
        _copy_assets(m.dir, staging)
    elif pre is not None:  # the ensemble's Python step holds its own copy
        _copy_assets(m.dir, onnx_file.parent.parent)
    if records:
        checked = _check_raw(onnx_file, pre, h, records, labels, timing)
    else:  # nothing raw to run: the network alone against torch on sample inputs
        checked = _check_network(m.module, network, m.sidecar, timing)
    network.unlink()
    return onnx_file, checked


def _check_options(
    fmt: str, target: str, preprocess: str, batch_size: int, repeats: int, max_batch_size: int
) -> None:
    if fmt not in FORMATS:
        raise InvalidInputError(f"format {fmt!r}: use one of {', '.join(FORMATS)}")
    if target not in TARGETS:
        raise InvalidInputError(f"target {target!r}: use one of {', '.join(TARGETS)}")
    if preprocess not in PREPROCESS:
        raise InvalidInputError(f"preprocess {preprocess!r}: use one of {', '.join(PREPROCESS)}")
    if preprocess == "python" and fmt != "triton":
        raise InvalidInputError("preprocess 'python' is a Triton ensemble: use it with triton")
    numbers = {"batch_size": batch_size, "repeats": repeats, "max_batch_size": max_batch_size}
    for name, value in numbers.items():
        if value < 1:
            raise InvalidInputError(f"{name}: must be at least 1, got {value}")


def _preprocess(
    model_dir: Path, sidecar: Mapping[str, Any], fmt: str, choice: str, notes: list[str]
) -> Preprocess | None:
    """The preprocessing graph, or None (with a note why) when it stays outside ONNX."""
    if choice == "python":
        return None
    try:
        return preprocess_graph(model_dir, sidecar)
    except Inexpressible as exc:
        if choice == "graph":
            raise InvalidInputError(f"cannot put the preprocessing in the graph: {exc}") from None
        where = "a Python step of the ensemble" if fmt == "triton" else "aifab's encoder"
        notes.append(f"the export takes encoded inputs, preprocessing stays in {where}: {exc}")
        return None


def _preprocess_kind(fmt: str, pre: Preprocess | None) -> str:
    if pre is not None:
        return "graph"
    return "python" if fmt == "triton" else "aifab"


def _features(sidecar: Mapping[str, Any]) -> list[str] | None:
    """The model's feature column names (tabular models), in input order."""
    features = ((sidecar.get("meta") or {}).get("preprocess") or {}).get("features")
    return [str(f) for f in features] if features else None


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def _handler(model_dir: Path, sidecar: Mapping[str, Any], threads: int) -> Any:
    """The serving handler on torch, using ``threads`` for batches above one thread's."""
    import torch

    from aifab.inference.classifier import ClassifierHandler

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)  # the handler takes its large-batch thread count from here
    try:
        handler = ClassifierHandler()
        handler.setup(model_dir, sidecar, {"backend": "torch", "max_request_items": 1 << 30})
    finally:
        torch.set_num_threads(previous)
    return handler


def _test_rows(
    model_dir: Path, sidecar: Mapping[str, Any], handler: Any, notes: list[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The test split's request fields, or nothing (and a note why) when not usable here."""
    try:
        records, labels = test_split(model_dir, sidecar)
    except (InvalidInputError, NotFoundError) as exc:
        # The export is still useful; the report just has no accuracy figures.
        notes.append(f"no accuracy: {exc.message}")
        return [], []
    if not records:
        notes.append("no accuracy: the test split has no rows")
        return [], []
    # A request carries only the model's input columns; the dataset may hold others.
    wanted = handler.input_columns
    requests = [{c: r.get(c) for c in wanted} for r in records]
    try:
        handler.decode({"records": requests})
    except InvalidInputError as exc:  # e.g. NULLs training imputed but serving refuses
        notes.append(f"no accuracy: test rows do not decode as requests: {exc.message}")
        return [], []
    return requests, labels


def _staging_dir(target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))


def _write_format(
    fmt: str,
    network: Path,
    inputs: Mapping[str, np.ndarray] | None,
    pre: Preprocess | None,
    staging: Path,
    spec: Mapping[str, Any],
    handler: Any,
    meta: Mapping[str, Any],
) -> Path:
    """Write the format's files under ``staging``; return the ONNX file that runs."""
    classes = list(handler.classes)
    if fmt == "onnx":
        return bundle(network, staging / "model.onnx", pre=pre, classes=classes, metadata=meta)
    if fmt == "onnx-int8":
        int8 = quantize_int8(network, staging / ".network-int8.onnx", calibration=inputs)
        out = bundle(int8, staging / "model.onnx", pre=pre, classes=classes, metadata=meta)
        int8.unlink()
        return out
    name, limit, kind = str(spec["name"]), int(spec["max_batch_size"]), str(spec["kind"])
    if pre is not None:
        root = staging / name
        path = bundle(network, root / "1" / "model.onnx", pre=pre, classes=classes, metadata=meta)
        write_repository(root, path, max_batch_size=limit, classes=classes, kind=kind)
        return path
    head = bundle(network, staging / ".network-head.onnx", pre=None, classes=classes, metadata=meta)
    fields = [(c["name"], c["type"]) for c in handler.describe()["input_columns"]]
    write_ensemble(
        staging,
        name,
        head,
        fields=fields,
        assets=Path(spec["assets"]),
        max_batch_size=limit,
        classes=classes,
        kind=kind,
    )
    return staging / f"{name}_network" / "1" / "model.onnx"


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


def _check_raw(
    onnx_file: Path,
    pre: Preprocess | None,
    handler: Any,
    records: list[dict[str, Any]],
    labels: list[str],
    timing: Mapping[str, int],
) -> dict[str, Any]:
    """Handler vs export from raw records to probabilities (see ``export_check``)."""
    from aifab.inference.classifier import SMALL_BATCH_ROWS

    fields = pre.fields if pre is not None else None
    runners: dict[int, Any] = {}

    def exported(threads: int) -> Any:
        if threads not in runners:
            runners[threads] = onnx_runner(onnx_file, threads, fields=fields, handler=handler)
        return runners[threads]

    batch, n = int(timing["batch_size"]), int(timing["threads"])
    result = compare(
        handler_runner(handler),
        exported,
        records,
        labels,
        list(handler.classes),
        batches=sorted({1, batch}),
        repeats=int(timing["repeats"]),
        # As the handler runs torch: one thread up to SMALL_BATCH_ROWS rows, else ``threads``.
        threads=lambda rows: 1 if rows <= SMALL_BATCH_ROWS else n,
    )
    at = result["latency"][str(batch)]
    return {
        **result,
        "latency_path": "raw records -> probabilities",
        "latency_ms": {"handler": at["handler_ms"], "exported": at["exported_ms"]},
        "speedup": at["speedup"],
        "latency_batch": batch,
        "threads": n,
    }


def _check_network(
    module: Any, network: Path, sidecar: Mapping[str, Any], timing: Mapping[str, int]
) -> dict[str, Any]:
    """Without raw test rows: the exported network vs torch on sample inputs (logits)."""
    import torch

    batch, n = int(timing["batch_size"]), int(timing["threads"])
    inputs = sample_inputs(sidecar, batch)
    ort_model = OrtModel(network, threads=n)
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        ref, got = torch_logits(module, inputs), ort_model(inputs)
        t_torch = median_ms(lambda: torch_logits(module, inputs), int(timing["repeats"]))
        t_ort = median_ms(lambda: ort_model(inputs), int(timing["repeats"]))
    finally:
        torch.set_num_threads(previous)
    return {
        "compared": "logits",
        "max_abs_diff": float(np.max(np.abs(ref - got))) if ref.size else 0.0,
        "accuracy": None,
        "latency_path": "encoded sample inputs -> logits (torch vs onnxruntime)",
        "latency": {str(batch): {"handler_ms": round(t_torch, 4), "exported_ms": round(t_ort, 4)}},
        "latency_ms": {"handler": round(t_torch, 4), "exported": round(t_ort, 4)},
        "speedup": round(t_torch / t_ort, 3) if t_ort > 0 else None,
        "latency_batch": batch,
        "threads": n,
    }


def _open_modes(root: Path) -> None:
    """Let a server running as another user read the export (temp files start 0600/0700)."""
    os.chmod(root, DIR_MODE)
    for path in root.rglob("*"):
        os.chmod(path, DIR_MODE if path.is_dir() else FILE_MODE)


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
