"""Triton Inference Server model repositories for exported classifiers.

Two layouts. Self-contained (the preprocessing is in the ONNX graph): ``<repo>/<name>/
config.pbtxt`` + ``1/model.onnx`` + ``labels.txt``. Ensemble (it is not): ``<name>_preprocess``
(Python backend: ``1/model.py`` runs aifab's own transform on raw fields), ``<name>_network``
(the ONNX network with the probabilities head) and ``<name>`` (the ensemble wiring them).
The instance kind follows the target: ``KIND_GPU`` for ``gpu``, ``KIND_CPU`` for ``cpu``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "KINDS",
    "TensorSpec",
    "config_pbtxt",
    "ensemble_pbtxt",
    "onnx_tensors",
    "write_ensemble",
    "write_repository",
]

KINDS = {"cpu": "KIND_CPU", "gpu": "KIND_GPU"}
_TYPES = {
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(int64)": "TYPE_INT64",
    "tensor(int32)": "TYPE_INT32",
    "tensor(bool)": "TYPE_BOOL",
    "tensor(string)": "TYPE_STRING",
}
#: Request field types (``Column.type``) -> the Triton type the ensemble takes them as.
_FIELD_TYPES = {"number": "TYPE_FP32", "integer": "TYPE_FP32", "boolean": "TYPE_BOOL"}
_PYTHON_NOTE = "# The Python backend's environment needs aifab installed (pip install aifab).\n"


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output as Triton sees it (without the batch axis)."""

    name: str
    data_type: str
    #: Dims after the batch axis; empty for a ``(batch,)`` tensor.
    dims: tuple[int, ...]
    label_file: str | None = None

    def text(self, reshape: bool) -> str:
        """The ``{ ... }`` entry of ``input [...]`` or ``output [...]``.

        A ``(batch,)`` tensor is ``[1]`` to Triton; ``reshape`` drops that axis for a model
        that takes it 1-D (an ONNX graph; Python steps and ensembles see ``(batch, 1)``).
        """
        dims = ", ".join(str(d) for d in self.dims) if self.dims else "1"
        lines = [
            "  {",
            f"    name: {json.dumps(self.name)}",
            f"    data_type: {self.data_type}",
            f"    dims: [ {dims} ]",
        ]
        if not self.dims and reshape:
            lines.append("    reshape: { shape: [ ] }")
        if self.label_file:
            lines.append(f"    label_filename: {json.dumps(self.label_file)}")
        return "\n".join([*lines, "  }"])


def onnx_tensors(args: Sequence[Any], label_output: str | None = None) -> list[TensorSpec]:
    """Specs of onnxruntime ``NodeArg``s; named or unknown axes are dynamic (-1)."""
    return [
        TensorSpec(
            a.name,
            _TYPES.get(a.type, "TYPE_FP32"),
            tuple(d if isinstance(d, int) and d >= 0 else -1 for d in a.shape[1:]),
            "labels.txt" if a.name == label_output else None,
        )
        for a in args
    ]


def _tensors(key: str, specs: Sequence[TensorSpec], reshape: bool = False) -> str:
    return f"{key} [\n" + ",\n".join(s.text(reshape) for s in specs) + "\n]\n"


def config_pbtxt(
    name: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    *,
    max_batch_size: int,
    kind: str = "KIND_CPU",
    backend: str = "onnxruntime",
) -> str:
    """The ``config.pbtxt`` of one model (``onnxruntime`` or ``python`` backend).

    Args:
        name: The model name (its directory name in the repository).
        inputs: Its inputs.
        outputs: Its outputs.
        max_batch_size: Largest batch Triton forms; axis 0 of every tensor is the batch.
        kind: ``KIND_CPU`` or ``KIND_GPU``.
        backend: ``onnxruntime`` or ``python``.
    """
    onnx = backend == "onnxruntime"
    head = 'platform: "onnxruntime_onnx"\n' if onnx else _PYTHON_NOTE + 'backend: "python"\n'
    return (
        f"name: {json.dumps(name)}\n{head}"
        f"max_batch_size: {int(max_batch_size)}\n"
        f"{_tensors('input', inputs, onnx)}{_tensors('output', outputs, onnx)}"
        f"instance_group [\n  {{\n    count: 1\n    kind: {kind}\n  }}\n]\n"
        "dynamic_batching { }\n"
    )


def ensemble_pbtxt(
    name: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    steps: Sequence[tuple[str, dict[str, str], dict[str, str]]],
    *,
    max_batch_size: int,
) -> str:
    """The ``config.pbtxt`` of an ensemble: ``steps`` are (model, input_map, output_map)."""

    def maps(key: str, mapping: dict[str, str]) -> str:
        return "".join(
            f"      {key} {{ key: {json.dumps(k)} value: {json.dumps(v)} }}\n"
            for k, v in mapping.items()
        )

    blocks = ",\n".join(
        f"    {{\n      model_name: {json.dumps(model)}\n      model_version: -1\n"
        f"{maps('input_map', ins)}{maps('output_map', outs)}    }}"
        for model, ins, outs in steps
    )
    return (
        f'name: {json.dumps(name)}\nplatform: "ensemble"\n'
        f"max_batch_size: {int(max_batch_size)}\n"
        f"{_tensors('input', inputs)}{_tensors('output', outputs)}"
        f"ensemble_scheduling {{\n  step [\n{blocks}\n  ]\n}}\n"
    )


def _session_args(onnx_file: Path) -> tuple[list[Any], list[Any]]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    session = ort.InferenceSession(str(onnx_file), opts, providers=["CPUExecutionProvider"])
    return list(session.get_inputs()), list(session.get_outputs())


def _write_labels(model_root: Path, classes: Sequence[str]) -> None:
    (model_root / "labels.txt").write_text("".join(f"{c}\n" for c in classes), encoding="utf-8")


def write_repository(
    model_root: Path,
    onnx_file: Path,
    *,
    max_batch_size: int,
    classes: Sequence[str],
    kind: str = "KIND_CPU",
) -> Path:
    """Write ``config.pbtxt`` and ``labels.txt`` for ``onnx_file`` (``<model_root>/1/model.onnx``).

    Args:
        model_root: The model's directory in the repository (its name is the model name).
        onnx_file: The model file.
        max_batch_size: Triton's ``max_batch_size``.
        classes: Class names, in logit order (``labels.txt``, one per line).
        kind: ``KIND_CPU`` or ``KIND_GPU``.

    Returns:
        The ``config.pbtxt`` path.
    """
    ins, outs = _session_args(onnx_file)
    text = config_pbtxt(
        model_root.name,
        onnx_tensors(ins),
        onnx_tensors(outs, label_output=outs[0].name),
        max_batch_size=max_batch_size,
        kind=kind,
    )
    _write_labels(model_root, classes)
    path = model_root / "config.pbtxt"
    path.write_text(text, encoding="utf-8")
    return path


def write_ensemble(
    repo: Path,
    name: str,
    network: Path,
    *,
    fields: Sequence[tuple[str, str]],
    assets: Path,
    max_batch_size: int,
    classes: Sequence[str],
    kind: str = "KIND_CPU",
) -> Path:
    """Write the three-model ensemble ``name`` under ``repo`` around ``network``.

    Args:
        repo: The repository directory.
        name: The ensemble's name (the other two are ``<name>_preprocess``, ``<name>_network``).
        network: The ONNX network with its head; moved to ``<name>_network/1/model.onnx``.
        fields: Raw request fields as (name, ``Column.type``).
        assets: The model directory whose files (sidecar, transform, tokenizer; not the
            weights) the preprocessing loads.
        max_batch_size: Triton's ``max_batch_size`` for all three.
        classes: Class names in logit order.
        kind: Instance kind of the network (preprocessing always runs on CPU).

    Returns:
        The ensemble's ``config.pbtxt`` path.
    """
    from aifab.models.checkpoint import WEIGHTS

    pre_root, net_root, top = repo / f"{name}_preprocess", repo / f"{name}_network", repo / name
    (net_root / "1").mkdir(parents=True)
    shutil.move(str(network), net_root / "1" / "model.onnx")
    write_repository(
        net_root,
        net_root / "1" / "model.onnx",
        max_batch_size=max_batch_size,
        classes=classes,
        kind=kind,
    )
    net_ins, net_outs = _session_args(net_root / "1" / "model.onnx")
    raw = [TensorSpec(n, _FIELD_TYPES.get(t, "TYPE_STRING"), ()) for n, t in fields]
    features = onnx_tensors(net_ins)
    (pre_root / "1").mkdir(parents=True)
    shutil.copyfile(Path(__file__).with_name("triton_model.py"), pre_root / "1" / "model.py")
    for src in assets.iterdir():
        if src.is_file() and src.name != WEIGHTS:
            shutil.copy2(src, pre_root / "1" / src.name)
    pre_text = config_pbtxt(
        pre_root.name, raw, features, max_batch_size=max_batch_size, backend="python"
    )
    (pre_root / "config.pbtxt").write_text(pre_text, encoding="utf-8")
    (top / "1").mkdir(parents=True)  # Triton wants a version directory, empty for ensembles
    _write_labels(top, classes)
    outputs = onnx_tensors(net_outs, label_output=net_outs[0].name)
    between = {f.name: f"pre/{f.name}" for f in features}
    steps = [
        (pre_root.name, {f.name: f.name for f in raw}, between),
        (net_root.name, between, {o.name: o.name for o in outputs}),
    ]
    text = ensemble_pbtxt(name, raw, outputs, steps, max_batch_size=max_batch_size)
    path = top / "config.pbtxt"
    path.write_text(text, encoding="utf-8")
    return path
