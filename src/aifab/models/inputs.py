"""Raw rows -> model inputs, shared by training and serving so both encode rows identically.

Tabular features (numeric columns, standardization), images (files to pixel arrays), text
(token ids and masks) and the train/valid/test split of rows. Pure NumPy/Arrow: no torch here.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from aifab.core.errors import InvalidInputError

SPLITS = ("train", "valid", "test")

__all__ = [
    "SPLITS",
    "Standardizer",
    "image_files",
    "numeric_matrix",
    "split_indices",
    "tokenize",
]


def split_indices(
    splits: Sequence[Any] | None,
    n: int,
    *,
    seed: int,
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
) -> dict[str, np.ndarray]:
    """Row indices of train/valid/test.

    Args:
        splits: the values of the dataset's split column, or None to make a seeded split.
        n: number of rows.
        seed: seed of the random split (used only without a split column).
        fractions: train/valid/test shares of the random split.

    Raises:
        InvalidInputError: a split value other than train/valid/test, or no training rows.
    """
    if splits is not None:
        values = np.asarray([str(s) if s is not None else "" for s in splits])
        bad = sorted(set(values.tolist()) - set(SPLITS))
        if bad:
            raise InvalidInputError(
                f"split column: unexpected value {bad[0]!r} (use train/valid/test)"
            )
        out = {s: np.flatnonzero(values == s) for s in SPLITS}
    else:
        order = np.random.default_rng(seed).permutation(n)
        a = int(round(n * fractions[0]))
        b = int(round(n * (fractions[0] + fractions[1])))
        out = {
            "train": np.sort(order[:a]),
            "valid": np.sort(order[a:b]),
            "test": np.sort(order[b:]),
        }
    if len(out["train"]) == 0:
        raise InvalidInputError("no training rows (split column has no 'train' value)")
    return out


def numeric_matrix(table: pa.Table, columns: Sequence[str]) -> np.ndarray:
    """``(rows, features)`` float32 from numeric columns; LIST columns (e.g. TF-IDF) expand.

    Raises:
        InvalidInputError: a non-numeric column, or a NULL value (named with its row).
    """
    parts = []
    for name in columns:
        col = table.column(name)
        if col.null_count:
            row = int(np.flatnonzero(np.asarray(col.is_null()))[0])
            raise InvalidInputError(f"feature {name!r}: row {row} is NULL (clean or impute first)")
        if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            parts.append(np.asarray(col.to_pylist(), dtype=np.float32).reshape(len(col), -1))
        elif (
            pa.types.is_integer(col.type)
            or pa.types.is_floating(col.type)
            or pa.types.is_boolean(col.type)
            or pa.types.is_decimal(col.type)
        ):
            parts.append(np.asarray(col.to_numpy(), dtype=np.float32).reshape(-1, 1))
        else:
            raise InvalidInputError(f"feature {name!r}: type {col.type} is not numeric")
    return np.concatenate(parts, axis=1) if parts else np.zeros((table.num_rows, 0), np.float32)


@dataclass(frozen=True)
class Standardizer:
    """Per-feature ``(x - mean) / std`` fitted on training rows (std 0 -> 1)."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, x: np.ndarray) -> Standardizer:
        """Fit on ``x`` (the training rows)."""
        std = x.std(axis=0)
        return cls(x.mean(axis=0), np.where(std > 0, std, 1.0))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Transform ``x``."""
        return ((x - self.mean) / self.std).astype(np.float32)

    def to_dict(self) -> dict[str, list[float]]:
        """JSON-ready parameters (stored with the model)."""
        return {"mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_dict(cls, params: dict[str, Any]) -> Standardizer:
        """The standardizer :meth:`to_dict` described (float32, as it was fitted)."""
        return cls(
            np.asarray(params["mean"], dtype=np.float32),
            np.asarray(params["std"], dtype=np.float32),
        )


def image_files(paths: Sequence[str | bytes], size: int, channels: int) -> np.ndarray:
    """Decode images (file paths, or image bytes from the lake) to ``(n, channels, size, size)``.

    Values are float32 in [0, 1].

    Raises:
        InvalidInputError: an image that cannot be read (named by path or row).
    """
    from PIL import Image

    mode = "L" if channels == 1 else "RGB"
    out = np.empty((len(paths), channels, size, size), dtype=np.float32)
    for i, path in enumerate(paths):
        source = io.BytesIO(path) if isinstance(path, bytes | bytearray) else Path(str(path))
        try:
            with Image.open(source) as im:
                arr = np.asarray(im.convert(mode).resize((size, size)), dtype=np.float32) / 255.0
        except (OSError, ValueError) as exc:
            what = f"row {i}" if isinstance(source, io.BytesIO) else str(path)
            raise InvalidInputError(f"image {what}: cannot read ({exc})") from None
        out[i] = arr.reshape(size, size, channels).transpose(2, 0, 1)
    return out


def tokenize(texts: Sequence[str], tokenizer: Any, max_length: int) -> dict[str, np.ndarray]:
    """Token ids and attention masks, truncated and right-padded to ``max_length``."""
    enc = tokenizer(
        [t or "" for t in texts],
        truncation=True,
        max_length=max_length,
        padding="max_length",
    )
    return {
        "input_ids": np.asarray(enc["input_ids"], dtype=np.int64),
        "attention_mask": np.asarray(enc["attention_mask"], dtype=np.int64),
    }
