"""Checked records -> model input arrays, made exactly as training made them from dataset rows.

Plain features (+ the saved standardizer), the saved feature transform (the same DuckDB SQL
and UDFs that built the training features), text (the saved tokenizer) and images (pixel
columns or base64 files). Every encoder reuses ``aifab.models.inputs``: no train/serve skew.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from aifab.core.errors import InvalidInputError
from aifab.inference.classifier_inputs import (
    Column,
    ImageData,
    Reject,
    arrow_column,
    check_feature,
    check_number,
    check_string,
    column_for_type,
    image_column,
)
from aifab.models.inputs import Standardizer, numeric_matrix, tokenize

__all__ = ["Encoder", "build_encoder"]

Records = Sequence[Mapping[str, Any]]


class Encoder(Protocol):
    """Input columns of a classifier and how its records become model inputs."""

    columns: list[Column]
    #: Fields a record may also carry (ignored), e.g. an id column passed through features.
    optional: list[str]

    def __call__(self, records: Records) -> dict[str, np.ndarray]:
        """Model inputs for ``records`` (already checked by the decoder)."""


class FeatureEncoder:
    """Plain numeric columns, standardized with the training statistics; pixel columns reshaped."""

    def __init__(
        self, features: list[str], scaler: Standardizer | None, shape: tuple[int, ...] | None
    ) -> None:
        self.features, self.scaler, self.shape = features, scaler, shape
        self.optional: list[str] = []
        self.columns = [Column(f, "number", check_feature) for f in features]

    def __call__(self, records: Records) -> dict[str, np.ndarray]:
        """``x``: what ``numeric_matrix`` + ``Standardizer`` made of the dataset's columns."""
        names = self.features
        # Python floats and ints convert to float32 as Arrow's float64/int64 columns do.
        x = np.array([[r[n] for n in names] for r in records], dtype=np.float32)
        x = x.reshape(len(records), len(names))
        if self.scaler is not None:
            x = self.scaler(x)
        return {"x": x if self.shape is None else x.reshape(-1, *self.shape)}


class ListFeatureEncoder(FeatureEncoder):
    """Plain features where some are LIST columns (e.g. TF-IDF vectors): via Arrow."""

    def __init__(self, features: list[str], scaler: Standardizer | None) -> None:
        super().__init__(features, scaler, None)
        self.columns = [Column(f, "any", _number_or_list) for f in features]

    def __call__(self, records: Records) -> dict[str, np.ndarray]:
        """``x`` through the training function itself (``numeric_matrix``)."""
        table = pa.table(
            {c.name: arrow_column(c, [r[c.name] for r in records]) for c in self.columns}
        )
        x = numeric_matrix(table, self.features)
        return {"x": x if self.scaler is None else self.scaler(x)}


def _number_or_list(value: Any) -> Any:
    if isinstance(value, list):
        return [check_number(v) for v in value]
    return check_feature(value)


class TransformEncoder:
    """The saved feature transform: the training projection SQL (``FeatureTransform``)."""

    def __init__(self, ft: Any, features: list[str], label: str, split: str | None) -> None:
        from aifab.data.feature_spec import Log1p

        self.ft, self.features = ft, features
        used = {f.column for f in ft.spec.features}
        types = {c["name"]: c["type"] for c in ft.input_schema}
        self.columns = [column_for_type(n, t, nullable=True) for n, t in types.items() if n in used]
        self.optional = [c for c in ft.passthrough if c not in (label, split) and c not in used]
        fatal = self._null_fatal()
        log1p = {f.column for f in ft.spec.features if isinstance(f, Log1p)}
        self.columns = [
            Column(
                c.name,
                c.type,
                _above(c.check, -1.0) if c.name in log1p else c.check,
                c.name not in fatal,
                c.arrow_type,
            )
            for c in self.columns
        ]

    def _null_fatal(self) -> set[str]:
        """Inputs the transform cannot take as NULL (found once, on an all-NULL row).

        Their features come out NULL, which training refused ("row N is NULL").
        """
        from aifab.data.feature_ops import feature_columns, udf_name

        nulls = pa.table({c.name: pa.nulls(1, c.arrow_type) for c in self.columns})
        try:
            probe = self._transform(nulls)
        except InvalidInputError:  # a transform that cannot even take NULLs: none may be
            return {c.name for c in self.columns}
        null_out = {n for n in probe.column_names if probe.column(n).null_count}
        ft = self.ft
        return {
            f.column
            for i, (f, p) in enumerate(zip(ft.spec.features, ft.params, strict=True))
            if any(name in null_out for name, _ in feature_columns(f, p, udf_name(i)))
        }

    def _transform(self, table: pa.Table) -> pa.Table:
        # The transform's own per-thread connection: the training SQL and UDFs, set up once.
        out: pa.Table = self.ft.transform_table(table)
        return out

    def __call__(self, records: Records) -> dict[str, np.ndarray]:
        """``x``: the transform's features through ``numeric_matrix``, as in training."""
        table = pa.table(
            {c.name: arrow_column(c, [r[c.name] for r in records]) for c in self.columns}
        )
        return {"x": numeric_matrix(self._transform(table), self.features)}


def _above(check: Any, low: float) -> Any:
    def checked(value: Any) -> Any:
        value = check(value)
        if value <= low:
            raise Reject(f"log1p needs a value above {low:g}, got {value}")
        return value

    return checked


class TextEncoder:
    """Token ids and attention masks from the tokenizer saved with the model."""

    def __init__(self, column: str, tokenizer: Any, max_length: int) -> None:
        self.column, self.tokenizer, self.max_length = column, tokenizer, max_length
        self.optional: list[str] = []
        # NULL text was tokenized as "" in training.
        self.columns = [Column(column, "text", check_string, nullable=True)]
        # Fast tokenizers mutate their padding/truncation state per call: one caller at a time.
        self._lock = threading.Lock()

    def __call__(self, records: Records) -> dict[str, np.ndarray]:
        """``input_ids`` and ``attention_mask``, padded to the training ``max_length``."""
        texts = [r[self.column] or "" for r in records]
        with self._lock:
            return tokenize(texts, self.tokenizer, self.max_length)


class ImageEncoder:
    """Base64 image files decoded, converted and resized as training read the files."""

    def __init__(self, column: str, shape: Sequence[int]) -> None:
        self.column, self.shape = column, tuple(int(s) for s in shape)
        self.optional: list[str] = []
        self.columns = [image_column(column, self.shape[1], self.shape[0])]

    def __call__(self, records: Records) -> dict[str, np.ndarray]:
        """``x``: ``(n, channels, size, size)`` float32 in [0, 1]."""
        x = np.empty((len(records), *self.shape), dtype=np.float32)
        check = self.columns[0].check
        for i, r in enumerate(records):
            value = r[self.column]
            if not isinstance(value, ImageData):
                try:
                    value = check(value)
                except Reject as exc:
                    raise InvalidInputError(f"row {i}, field {self.column!r}: {exc}") from None
            x[i] = value.pixels
        return {"x": x}


def text_encoder(model_dir: Path, pre: Mapping[str, Any]) -> TextEncoder:
    """The text encoder of ``pre`` with the tokenizer saved in ``model_dir``.

    Raises:
        InvalidInputError: the tokenizer file cannot be loaded.
    """
    from aifab.models.tokenizer import load_tokenizer

    try:
        tok = load_tokenizer(model_dir)
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"{model_dir}/tokenizer.json: cannot load ({exc})") from None
    return TextEncoder(str(pre["text_column"]), tok, int(pre["max_length"]))


#: The ``meta.preprocess.modality`` values a classifier may have.
MODALITIES = ("tabular", "text", "image", "multimodal")


def build_encoder(
    model_dir: Path, sidecar: Mapping[str, Any], image_caps: Mapping[str, int] | None = None
) -> Encoder:
    """The encoder a classify model's ``meta.preprocess`` describes.

    ``image_caps`` (``max_image_bytes``, ``max_image_pixels``) bound a multimodal model's
    request images.

    Raises:
        InvalidInputError: not a classify model, or its transform/tokenizer file is bad.
    """
    pre = (sidecar.get("meta") or {}).get("preprocess") or {}
    where = f"{model_dir}/aifab-model.json"
    if not pre.get("classes") or pre.get("modality") not in MODALITIES:
        raise InvalidInputError(f"{where}: no meta.preprocess of a classifier (classes, modality)")
    try:
        if pre["modality"] == "multimodal":
            from aifab.inference.multimodal import MultimodalEncoder

            return MultimodalEncoder(model_dir, pre, **(image_caps or {}))
        if pre["modality"] == "text":
            return text_encoder(model_dir, pre)
        if pre.get("image_column"):
            return ImageEncoder(str(pre["image_column"]), pre["image_shape"])
        features = [str(f) for f in pre["features"]]
        if "feature_transform" in pre:
            from aifab.data.feature_transform import FeatureTransform

            ft = FeatureTransform.load(model_dir / str(pre["feature_transform"]["file"]))
            split = (pre.get("split") or {}).get("column")
            return TransformEncoder(ft, features, str(pre.get("label")), split)
        scaler = Standardizer.from_dict(pre["standardize"]) if "standardize" in pre else None
        shape = tuple(int(s) for s in pre["image_shape"]) if "image_shape" in pre else None
        width = (sidecar.get("config") or {}).get("in_features")
        if shape is None and width is not None and int(width) != len(features):
            return ListFeatureEncoder(features, scaler)
        return FeatureEncoder(features, scaler, shape)
    except (KeyError, TypeError) as exc:
        raise InvalidInputError(f"{where}: malformed meta.preprocess ({exc!r})") from None
