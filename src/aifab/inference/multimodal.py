"""Multimodal classifier records -> fusion-classifier inputs: a base64 image, a text, fields.

Each modality is encoded by the single-modality encoder (the same code training used), and
the outputs are renamed to the fusion model's keywords (``image``, ``input_ids``,
``attention_mask``, ``features``). Images are capped in bytes and pixels before decoding.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from aifab.core.errors import InvalidInputError
from aifab.inference.classifier_encoding import (
    FeatureEncoder,
    ImageEncoder,
    Records,
    TextEncoder,
    text_encoder,
)
from aifab.inference.classifier_inputs import Column, image_column
from aifab.models.inputs import Standardizer

__all__ = ["MAX_IMAGE_BYTES", "MAX_IMAGE_PIXELS", "MultimodalEncoder", "absent_inputs"]

#: Default caps of one request image (encoded bytes; width x height), checked before decoding.
MAX_IMAGE_BYTES = 1 << 20
MAX_IMAGE_PIXELS = 1024 * 1024


class MultimodalEncoder:
    """The encoders of a fusion classifier's modalities, behind one record encoder.

    Args:
        model_dir: The model directory (its tokenizer, for text).
        pre: The sidecar's ``meta.preprocess``.
        max_image_bytes: Largest encoded image a record may carry.
        max_image_pixels: Largest width x height a record's image may have.
    """

    def __init__(
        self,
        model_dir: Path,
        pre: Mapping[str, Any],
        *,
        max_image_bytes: int = MAX_IMAGE_BYTES,
        max_image_pixels: int = MAX_IMAGE_PIXELS,
    ) -> None:
        self.columns: list[Column] = []
        self.optional: list[str] = []
        self.modalities: list[str] = []
        self._image: ImageEncoder | None = None
        self._text: TextEncoder | None = None
        self._fields: FeatureEncoder | None = None
        if pre.get("image_column"):
            self._image = ImageEncoder(str(pre["image_column"]), pre["image_shape"])
            shape = self._image.shape
            self._image.columns = [
                image_column(
                    self._image.column,
                    shape[1],
                    shape[0],
                    max_bytes=max_image_bytes,
                    max_pixels=max_image_pixels,
                )
            ]
            self._add("image", self._image.columns)
        if pre.get("text_column"):
            self._text = text_encoder(model_dir, pre)
            self._add("text", self._text.columns)
        if pre.get("features"):
            scaler = Standardizer.from_dict(pre["standardize"]) if "standardize" in pre else None
            self._fields = FeatureEncoder([str(f) for f in pre["features"]], scaler, None)
            self._add("tabular", self._fields.columns)
        if not self.modalities:
            raise InvalidInputError("meta.preprocess: a multimodal model with no inputs")

    def _add(self, modality: str, columns: list[Column]) -> None:
        self.modalities.append(modality)
        self.columns += columns

    def __call__(self, records: Records) -> dict[str, np.ndarray]:
        """The fusion model's keyword inputs for ``records``."""
        out: dict[str, np.ndarray] = {}
        if self._image is not None:
            out["image"] = self._image(records)["x"]
        if self._text is not None:
            out.update(self._text(records))
        if self._fields is not None:
            out["features"] = self._fields(records)["x"]
        return out


def absent_inputs(inputs: dict[str, np.ndarray], modality: str) -> dict[str, np.ndarray]:
    """``inputs`` with one modality replaced by "nothing there" (for explanations).

    An image becomes mid-grey, a text all padding (the encoder then pools nothing), fields
    their training mean (0 after standardizing).
    """
    out = dict(inputs)
    if modality == "image":
        out["image"] = np.full_like(inputs["image"], 0.5)
    elif modality == "text":
        out["input_ids"] = np.zeros_like(inputs["input_ids"])
        out["attention_mask"] = np.zeros_like(inputs["attention_mask"])
    else:
        out["features"] = np.zeros_like(inputs["features"])
    return out
