"""ONNX Runtime on the CPU: one inference session per exported model, called with NumPy inputs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from aifab.core.errors import InvalidInputError, first_line

__all__ = ["OrtModel"]

_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


class OrtModel:
    """An ONNX model in an onnxruntime CPU session; ``model(inputs)`` returns float32 logits.

    ``session.run`` is thread-safe, so several batcher workers may share one instance.

    Args:
        path: The ``.onnx`` file.
        threads: Intra-op threads (None: onnxruntime's default, one per physical core).

    Raises:
        InvalidInputError: the file is missing or not a loadable ONNX model.
    """

    def __init__(self, path: Path, *, threads: int | None = None) -> None:
        import onnxruntime as ort

        self.path = Path(path)
        if not self.path.is_file():
            raise InvalidInputError(f"{self.path}: ONNX model file is missing")
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3  # errors only: ORT's warnings are about its own internals
        if threads is not None:
            opts.intra_op_num_threads = max(1, int(threads))
            opts.inter_op_num_threads = 1
        try:
            self.session: Any = ort.InferenceSession(
                str(self.path), opts, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # noqa: BLE001 - ORT raises its own untyped errors for bad files
            first = first_line(exc)
            raise InvalidInputError(f"{self.path}: cannot load the ONNX model: {first}") from None
        self.inputs = {i.name: _DTYPES.get(i.type, np.float32) for i in self.session.get_inputs()}
        outputs = [o.name for o in self.session.get_outputs()]
        self.output = "logits" if "logits" in outputs else outputs[0]

    @property
    def input_names(self) -> list[str]:
        """The model's input names, in graph order."""
        return list(self.inputs)

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Logits (float32) for a batch of encoded inputs (extra keys are ignored).

        Raises:
            InvalidInputError: an input the model needs is missing.
        """
        missing = [n for n in self.inputs if n not in inputs]
        if missing:
            raise InvalidInputError(
                f"ONNX model {self.path.name}: input {missing[0]!r} missing "
                f"(needs {', '.join(self.inputs)})"
            )
        feed: dict[str, np.ndarray] = {
            n: np.ascontiguousarray(inputs[n], dtype=t) for n, t in self.inputs.items()
        }
        out = self.session.run([self.output], feed)[0]
        return np.asarray(out, dtype=np.float32)
