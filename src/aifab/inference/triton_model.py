"""Triton Python-backend model (copied as ``model.py``): raw record fields -> model inputs.

It runs aifab's own request checks and encoder (the fitted feature transform, tokenizer or
image decoding that serving uses) on the files beside it, so the ensemble's network sees
exactly the inputs ``/v1/predict`` would make. The Python backend's environment needs aifab.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

#: Field types whose value arrives as text (bytes); the others arrive as numbers or booleans.
_TEXT = {"string", "text", "date", "timestamp", "image", "any"}


class TritonPythonModel:
    """Triton's entry point: ``initialize`` once, ``execute`` per batch of requests."""

    def initialize(self, args: dict[str, Any]) -> None:
        """Load the encoder from ``<model dir>/<version>/`` (sidecar and transform files)."""
        from aifab.inference.classifier_encoding import build_encoder
        from aifab.inference.classifier_inputs import RecordDecoder

        here = Path(args["model_repository"]) / str(args["model_version"])
        sidecar = json.loads((here / "aifab-model.json").read_text(encoding="utf-8"))
        config = json.loads(args["model_config"])
        self.encoder = build_encoder(here, sidecar)
        limit = max(1, int(config.get("max_batch_size") or 1))
        self.decoder = RecordDecoder(
            self.encoder.columns, optional=self.encoder.optional, max_items=limit
        )
        self.outputs = [str(o["name"]) for o in config["output"]]

    def _records(self, request: Any) -> list[dict[str, Any]]:
        fields: dict[str, list[Any]] = {}
        rows = 0
        for column in self.encoder.columns:
            tensor = pb_utils.get_input_tensor_by_name(request, column.name)
            if tensor is None:
                continue  # the decoder names it if the model needs it
            values = [_value(v, column.type) for v in tensor.as_numpy().reshape(-1).tolist()]
            fields[column.name] = values
            rows = max(rows, len(values))
        return [{k: v[i] for k, v in fields.items() if i < len(v)} for i in range(rows)]

    def execute(self, requests: list[Any]) -> list[Any]:
        """One response per request: the model inputs, or an error naming the row and field."""
        from aifab.core.errors import AifabError

        responses = []
        for request in requests:
            try:
                checked = self.decoder.decode({"records": self._records(request)})
                inputs = self.encoder(checked)
            except AifabError as exc:
                error = pb_utils.TritonError(str(exc))
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            tensors = [pb_utils.Tensor(n, np.ascontiguousarray(inputs[n])) for n in self.outputs]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses

    def finalize(self) -> None:
        """Nothing to release."""


def _value(value: Any, kind: str) -> Any:
    """A tensor element as the JSON value a request would carry."""
    if isinstance(value, bytes):
        text = value.decode("utf-8")
        # Text tensors cannot hold NULL: an empty date, timestamp or image is a missing one.
        return None if text == "" and kind not in ("string", "text") else text
    if kind in _TEXT:
        return str(value)
    return value
