"""Triton Inference Server model repositories: ``config.pbtxt`` for an exported ONNX classifier.

Layout: ``<repo>/<name>/config.pbtxt``, ``<repo>/<name>/1/model.onnx`` and ``labels.txt`` (the
class names, so Triton's classification extension can answer with labels).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["config_pbtxt", "write_repository"]

_TYPES = {
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(int64)": "TYPE_INT64",
    "tensor(int32)": "TYPE_INT32",
    "tensor(bool)": "TYPE_BOOL",
}


def _dims(shape: Sequence[Any]) -> str:
    """Triton dims without the batch axis; named or unknown axes are dynamic (-1)."""
    return ", ".join(str(d) if isinstance(d, int) and d >= 0 else "-1" for d in shape[1:])


def _tensor(arg: Any, label_file: str | None = None) -> str:
    lines = [
        "  {",
        f"    name: {json.dumps(arg.name)}",
        f"    data_type: {_TYPES.get(arg.type, 'TYPE_FP32')}",
        f"    dims: [ {_dims(arg.shape)} ]",
    ]
    if label_file:
        lines.append(f"    label_filename: {json.dumps(label_file)}")
    return "\n".join([*lines, "  }"])


def config_pbtxt(
    name: str, inputs: Sequence[Any], outputs: Sequence[Any], *, max_batch_size: int
) -> str:
    """The ``config.pbtxt`` text for an ONNX model served by Triton's onnxruntime backend.

    Args:
        name: The model name (its directory name in the repository).
        inputs: onnxruntime ``NodeArg``s of the model inputs (``name``, ``type``, ``shape``).
        outputs: The same for its outputs; the first one gets ``labels.txt``.
        max_batch_size: Largest batch Triton forms; axis 0 of every tensor is the batch.
    """
    ins = ",\n".join(_tensor(a) for a in inputs)
    outs = ",\n".join(_tensor(a, "labels.txt" if i == 0 else None) for i, a in enumerate(outputs))
    return (
        f"name: {json.dumps(name)}\n"
        'platform: "onnxruntime_onnx"\n'
        f"max_batch_size: {int(max_batch_size)}\n"
        f"input [\n{ins}\n]\n"
        f"output [\n{outs}\n]\n"
        "instance_group [\n  {\n    count: 1\n    kind: KIND_CPU\n  }\n]\n"
        "dynamic_batching { }\n"
    )


def write_repository(
    model_root: Path, onnx_file: Path, *, max_batch_size: int, classes: Sequence[str]
) -> Path:
    """Write ``config.pbtxt`` and ``labels.txt`` for ``onnx_file`` (``<model_root>/1/model.onnx``).

    Args:
        model_root: The model's directory in the repository (its name is the model name).
        onnx_file: The model file.
        max_batch_size: Triton's ``max_batch_size``.
        classes: Class names, in logit order (``labels.txt``, one per line).

    Returns:
        The ``config.pbtxt`` path.
    """
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(onnx_file), opts, providers=["CPUExecutionProvider"])
    text = config_pbtxt(
        model_root.name,
        session.get_inputs(),
        session.get_outputs(),
        max_batch_size=max_batch_size,
    )
    (model_root / "labels.txt").write_text("".join(f"{c}\n" for c in classes), encoding="utf-8")
    path = model_root / "config.pbtxt"
    path.write_text(text, encoding="utf-8")
    return path
