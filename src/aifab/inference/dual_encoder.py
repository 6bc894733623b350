"""The dual-encoder embeddings handler: texts and images into one space, behind /v1/embeddings.

A ``contrastive`` recipe model (zoo ``dual-encoder``) served as an embeddings deployment. Each
input is a text, or an image sent as a ``data:image/...;base64,`` URL (capped in bytes and
pixels before decoding); both come back as L2-normalised vectors of the same space, so a
text's vector finds the images it describes (and an image's vector finds similar images).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from aifab.core.errors import InvalidInputError
from aifab.inference.classifier_inputs import TOKENS_PER_IMAGE, ImageData, Reject, image_column
from aifab.inference.embeddings import MAX_INPUTS
from aifab.inference.multimodal import MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS
from aifab.models.inputs import tokenize

#: Images one embeddings request may carry (each is decoded in the worker pool).
MAX_IMAGES = 16

__all__ = ["DualEncoderHandler", "is_image_url"]


def is_image_url(text: str) -> bool:
    """Whether an input string is an image (a ``data:image/...`` URL) rather than a text."""
    return text.startswith("data:image/")


class DualEncoderHandler:
    """Serves a dual encoder: texts and ``data:image`` URLs -> vectors of one space."""

    kind = "embeddings"
    chunk_items = 16

    def __init__(self) -> None:
        self.model: Any = None
        self.model_id = ""
        self.dimension = 0
        self.max_length = 0
        self._tokenizer: Any = None
        self._image: Any = None
        # The fast tokenizer changes its padding state per call: one caller at a time.
        self._lock = threading.Lock()

    def setup(
        self, model_dir: Path, sidecar: Mapping[str, Any], options: Mapping[str, Any]
    ) -> None:
        """Load the model, its tokenizer and image preprocessing from ``model_dir``.

        Options: ``model_id``, ``max_image_bytes``, ``max_image_pixels``.

        Raises:
            InvalidInputError: not a dual encoder with its preprocessing and tokenizer.
        """
        from aifab.models.checkpoint import load_model
        from aifab.models.tokenizer import load_tokenizer

        pre = (sidecar.get("meta") or {}).get("preprocess") or {}
        if sidecar.get("builder") != "dual-encoder" or "image_shape" not in pre:
            raise InvalidInputError(f"{model_dir}: not a dual encoder with meta.preprocess")
        module, _ = load_model(model_dir)
        try:
            self._tokenizer = load_tokenizer(model_dir)
        except (OSError, ValueError) as exc:
            raise InvalidInputError(f"{model_dir}/tokenizer.json: cannot load ({exc})") from None
        channels, size = int(pre["image_shape"][0]), int(pre["image_shape"][1])
        self._image = image_column(
            "input",
            size,
            channels,
            max_bytes=int(options.get("max_image_bytes") or MAX_IMAGE_BYTES),
            max_pixels=int(options.get("max_image_pixels") or MAX_IMAGE_PIXELS),
        )
        self.model = module.eval()
        self.max_length = int(pre["max_length"])
        self.dimension = int(sidecar["config"]["embed_dim"])
        self.model_id = str(options.get("model_id") or Path(model_dir).name)

    def decode(self, payload: Any) -> list[str]:
        """``str`` | ``list[str]`` | ``{"input": ...}`` -> texts and checked images.

        Raises:
            InvalidInputError: empty input, a non-string item, a bad or oversized image (named
                by index), more than ``MAX_INPUTS`` items, or an unknown field.
        """
        if isinstance(payload, Mapping):
            unknown = sorted(set(payload) - {"input"})
            if unknown:
                raise InvalidInputError(f"{unknown[0]}: unknown field")
            payload = payload.get("input")
        items = [payload] if isinstance(payload, str) else payload
        if not isinstance(items, list) or not items:
            raise InvalidInputError("input: must be a non-empty string or list of strings")
        if len(items) > MAX_INPUTS:
            raise InvalidInputError(
                f"input: at most {MAX_INPUTS} items per request, got {len(items)}"
            )
        images = sum(1 for item in items if isinstance(item, str) and is_image_url(item))
        if images > MAX_IMAGES:
            raise InvalidInputError(f"input: at most {MAX_IMAGES} images per request, got {images}")
        out: list[str] = []
        for i, item in enumerate(items):
            if not isinstance(item, str) or not item:
                raise InvalidInputError(f"input[{i}]: must be a non-empty string")
            if is_image_url(item):
                try:
                    item = self._image.check(item)
                except Reject as exc:
                    raise InvalidInputError(f"input[{i}]: {exc}") from None
            out.append(item)
        return out

    def predict(self, items: list[str]) -> list[list[float]]:
        """One unit vector per item, texts and images alike, in the order given."""
        import torch

        images = [i for i, t in enumerate(items) if isinstance(t, ImageData) or is_image_url(t)]
        texts = [i for i in range(len(items)) if i not in set(images)]
        out = np.zeros((len(items), self.dimension), dtype=np.float32)
        with torch.inference_mode():
            if images:
                pixels = np.stack([self._pixels(items[i]) for i in images])
                out[images] = self.model.encode_image(torch.from_numpy(pixels)).numpy()
            if texts:
                with self._lock:
                    enc = tokenize([items[i] for i in texts], self._tokenizer, self.max_length)
                vec = self.model.encode_text(
                    torch.from_numpy(enc["input_ids"]), torch.from_numpy(enc["attention_mask"])
                )
                out[texts] = vec.numpy()
        result: list[list[float]] = out.tolist()
        return result

    def _pixels(self, item: str) -> np.ndarray:
        value = item if isinstance(item, ImageData) else self._image.check(item)
        pixels: np.ndarray = value.pixels
        return pixels

    def encode(self, output: list[float]) -> list[float]:
        """A vector is already JSON-ready."""
        return output

    def detokenize(self, ids: list[int]) -> str:
        """Token ids -> text with the model's tokenizer.

        Raises:
            InvalidInputError: an id outside the vocabulary (named).
        """
        from aifab.inference.lm import detokenize_ids

        with self._lock:
            return detokenize_ids(self._tokenizer, ids, keep_special=False)

    def count_tokens(self, text: str) -> int:
        """Tokens a text costs (truncated to the model's length), or an image (by pixels).

        Images cost :func:`~aifab.inference.classifier_inputs.image_tokens`.
        """
        if isinstance(text, ImageData):
            return text.tokens
        if is_image_url(text):
            return TOKENS_PER_IMAGE
        with self._lock:
            ids = self._tokenizer(text, truncation=True, max_length=self.max_length)["input_ids"]
        return len(ids)

    def describe(self) -> dict[str, Any]:
        """Kind, model id, dimension, token limit and that images are taken."""
        return {
            "kind": self.kind,
            "model_id": self.model_id,
            "dimension": self.dimension,
            "max_seq_length": self.max_length,
            "max_inputs": MAX_INPUTS,
            "modalities": ["text", "image"],
        }
