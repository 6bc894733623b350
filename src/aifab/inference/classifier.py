"""The classifier handler: tabular, text and image classify models behind ``/v1/predict``.

Records are checked by ``classifier_inputs``, encoded by ``classifier_encoding`` exactly as
training encoded dataset rows, and run on torch or ONNX Runtime (the ONNX file is exported once
and cached beside the downloaded model, or in the workspace cache).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from aifab.core.errors import InvalidInputError
from aifab.inference.classifier_encoding import Encoder, build_encoder
from aifab.inference.classifier_inputs import RecordDecoder
from aifab.inference.multimodal import MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS

__all__ = ["BACKENDS", "ClassifierHandler", "onnx_file"]

BACKENDS = ("torch", "onnx")
Logits = Callable[[dict[str, np.ndarray]], np.ndarray]


class ClassifierHandler:
    """A classify model: records in, a label and class probabilities out."""

    kind = "classifier"

    def __init__(self) -> None:
        self.input_columns: list[str] = []
        self.classes: list[str] = []
        self.modality = ""
        #: The modalities a record carries (several for a multimodal model).
        self.input_modalities: list[str] = []
        self.backend = "torch"
        self.max_request_items = 1000
        self._encoder: Encoder | None = None
        self._decoder: RecordDecoder | None = None
        self._logits: Logits | None = None

    def setup(
        self, model_dir: Path, sidecar: Mapping[str, Any], options: Mapping[str, Any]
    ) -> None:
        """Load the model and its preprocessing from ``model_dir``.

        Args:
            model_dir: The model directory (weights, sidecar, transform or tokenizer).
            sidecar: Its ``aifab-model.json``.
            options: ``backend`` (torch | onnx), ``max_request_items`` (default 1000),
                ``threads`` (intra-op threads: ONNX Runtime's; for torch, the most a big
                batch uses); for models with an image input ``max_images`` (records per
                request; default 64, or ``max_request_items`` when that is given),
                ``max_image_bytes`` and ``max_image_pixels``.

        Raises:
            InvalidInputError: a bad option, or missing or corrupt model files (named).
        """
        model_dir = Path(model_dir)
        backend = str(options.get("backend") or "torch")
        if backend not in BACKENDS:
            raise InvalidInputError(f"backend: {backend!r} is not one of {', '.join(BACKENDS)}")
        limit = _positive(options, "max_request_items", 1000)
        caps = {k: _positive(options, k, v) for k, v in IMAGE_CAPS.items()}
        encoder = build_encoder(model_dir, sidecar, caps)
        pre = sidecar["meta"]["preprocess"]
        self._logits = (
            _onnx_logits(model_dir, sidecar, options.get("threads"))
            if backend == "onnx"
            else _torch_logits(model_dir, options.get("threads"))
        )
        self._encoder = encoder
        self._decoder = RecordDecoder(encoder.columns, optional=encoder.optional, max_items=limit)
        if any(c.type == "image" for c in encoder.columns):
            # A caller that sets max_request_items (an export's accuracy check, the explainer)
            # bounds images with it; a deployment without either option gets MAX_IMAGES.
            default = limit if "max_request_items" in options else MAX_IMAGES
            images = _positive(options, "max_images", default)
            if images < limit:
                # Counted on the raw body, before one image is decoded.
                self._decoder = RecordDecoder(
                    encoder.columns,
                    optional=encoder.optional,
                    max_items=images,
                    limit_name="max_images",
                )
        self.input_columns = [c.name for c in encoder.columns]
        self.classes = [str(c) for c in pre["classes"]]
        self.modality = str(pre["modality"])
        self.input_modalities = list(getattr(encoder, "modalities", [self.modality]))
        self.backend = backend
        self.max_request_items = limit

    def decode(self, payload: Any) -> list[dict[str, Any]]:
        """``{"records": [{col: value}]}`` or ``{"rows": [[...]]}`` -> checked records.

        Raises:
            InvalidInputError: missing, unknown or mistyped fields, NULLs the model cannot
                take, bad images, no rows or too many (the message names the row and field).
        """
        assert self._decoder is not None, "setup() first"
        return self._decoder.decode(payload)

    def encode_inputs(self, records: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        """Model inputs for ``records``, exactly as training encoded the same raw rows."""
        assert self._encoder is not None, "setup() first"
        return self._encoder(records)

    def forward(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """Float32 logits ``(rows, classes)`` of encoded inputs."""
        assert self._logits is not None, "setup() first"
        return self._logits(inputs)

    def predict(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``{"label", "probabilities": {class: p}}`` per record."""
        logits = self.forward(self.encode_inputs(items))
        z = logits.astype(np.float64)
        z -= z.max(axis=1, keepdims=True)
        np.exp(z, out=z)
        z /= z.sum(axis=1, keepdims=True)
        classes = self.classes
        return [
            {"label": classes[k], "probabilities": dict(zip(classes, row, strict=True))}
            for k, row in zip(logits.argmax(axis=1).tolist(), z.tolist(), strict=True)
        ]

    def encode(self, output: Any) -> Any:
        """Predictions are JSON-ready already."""
        return output

    def describe(self) -> dict[str, Any]:
        """Input columns (name and type), classes, modality and backend."""
        columns = self._encoder.columns if self._encoder is not None else []
        return {
            "kind": self.kind,
            "input_columns": [{"name": c.name, "type": c.type} for c in columns],
            "classes": list(self.classes),
            "modality": self.modality,
            "modalities": list(self.input_modalities),
            "backend": self.backend,
            "max_request_items": self.max_request_items,
        }


#: Image records one request may carry by default (each image is decoded and resized).
MAX_IMAGES = 64
#: Per-image caps of multimodal models (encoded bytes, width x height), checked pre-decoding.
IMAGE_CAPS = {"max_image_bytes": MAX_IMAGE_BYTES, "max_image_pixels": MAX_IMAGE_PIXELS}


def _positive(options: Mapping[str, Any], key: str, default: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{key}: expected an integer >= 1, got {value!r}")
    return value


#: Batches up to this many rows run torch on one intra-op thread: splitting a one-row MLP
#: over cores costs more than it saves (7 ms instead of 0.1 ms on 2 busy cores).
SMALL_BATCH_ROWS = 64


def _torch_logits(model_dir: Path, threads: Any = None) -> Logits:
    import torch

    from aifab.models.checkpoint import load_model

    module, _ = load_model(model_dir)
    default_threads = torch.get_num_threads()
    if threads:
        default_threads = min(default_threads, int(threads))
    local = threading.local()

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        rows = len(next(iter(inputs.values()))) if inputs else 0
        want = 1 if rows <= SMALL_BATCH_ROWS else default_threads
        if getattr(local, "threads", None) != want:
            # Per calling thread (OpenMP's setting is thread-local): other deployments' and
            # the event loop's threads keep theirs.
            torch.set_num_threads(want)
            local.threads = want
        tensors = {k: torch.from_numpy(v) for k, v in inputs.items()}
        with torch.inference_mode():
            # As training calls them: mlp/cnn take one tensor, the transformer keywords.
            out = module(tensors["x"]) if "x" in tensors else module(**tensors)
        logits: np.ndarray = out.float().numpy()
        return logits

    return run


def _onnx_logits(model_dir: Path, sidecar: Mapping[str, Any], threads: Any) -> Logits:
    from aifab.inference.onnx_runtime import OrtModel

    model = OrtModel(onnx_file(model_dir, sidecar), threads=int(threads) if threads else None)

    def run(inputs: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(model(inputs), dtype=np.float32)

    return run


def onnx_file(model_dir: Path, sidecar: Mapping[str, Any]) -> Path:
    """The model's ONNX file, exported on first use.

    It goes to ``<model_dir>/onnx/model.onnx`` when the directory is the workspace's download
    cache of a registry version (immutable, ours to write); otherwise (a user's directory, a
    read-only one) to ``<workspace>/cache/onnx/<key>/model.onnx``, keyed by the directory,
    its weights file and sidecar, so a retrained model in the same place exports afresh.
    """
    from aifab.core.ids import digest
    from aifab.core.workspace import get_workspace

    model_dir = Path(model_dir).resolve()
    cache = (get_workspace().root / "cache").resolve()
    local = model_dir / "onnx" / "model.onnx"
    ours = model_dir.is_relative_to(cache / "models") and os.access(model_dir, os.W_OK)
    if ours and local.is_file():
        return local
    weights = model_dir / str(sidecar.get("weights") or "model.safetensors")
    stat = weights.stat() if weights.is_file() else None
    key = digest(
        {
            "dir": str(model_dir),
            "weights": [stat.st_size, stat.st_mtime_ns] if stat else None,
            "sidecar": digest(dict(sidecar)),
        }
    )[:16]
    shared = cache / "onnx" / key / "model.onnx"
    if shared.is_file():
        return shared
    from aifab.inference.onnx_export import sample_inputs, to_onnx
    from aifab.models.checkpoint import load_model

    module, _ = load_model(model_dir)
    sample = sample_inputs(sidecar)
    if ours:
        try:
            return to_onnx(module, sample, local)
        except PermissionError:
            pass  # e.g. a cache directory made read-only by its owner: fall back to ours
    return to_onnx(module, sample, shared)
