"""Dataset rows -> the fusion classifier's inputs: an image, a text and fields per row.

The classify recipe calls :func:`multimodal_inputs` for ``modality: multimodal``. Each input is
made as the single-modality path makes it (images as ``image_files`` reads them, from lake
bytes or file paths; text through a BPE tokenizer trained on the training rows; fields
standardized with training statistics), so serving reuses the same encoders.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from aifab.core.errors import InvalidInputError
from aifab.models.zoo_multimodal import branch_defaults
from aifab.train import datasets

if TYPE_CHECKING:
    from aifab.train.classification import ClassifyData
    from aifab.train.classify_config import ClassifyConfig as Config

#: Image input shape when the config gives none.
DEFAULT_SHAPE = (3, 32, 32)


def input_columns(cfg: Config) -> list[str]:
    """The dataset columns a multimodal config reads (image, text, then fields)."""
    cols = [c for c in (cfg.image_column, cfg.text_column) if c]
    if isinstance(cfg.features, list):
        cols += cfg.features
    return cols


def check_config(cfg: Config) -> None:
    """Raise ``InvalidInputError`` for a multimodal config without usable inputs."""
    if cfg.features is not None and not isinstance(cfg.features, list):
        raise InvalidInputError(
            "features: a multimodal model takes a list of numeric columns, not a feature spec"
        )
    if not input_columns(cfg):
        raise InvalidInputError(
            "modality: multimodal needs at least one of image_column, text_column, features"
        )


def multimodal_inputs(cfg: Config, table: Any, data: ClassifyData) -> None:
    """Fill ``data.inputs``, ``data.preprocess`` and ``data.model_defaults`` for fusion."""
    check_config(cfg)
    defaults: dict[str, Any] = {"num_classes": len(data.classes)}
    pre = data.preprocess
    if cfg.image_column:
        shape = tuple(cfg.image_shape or DEFAULT_SHAPE)
        if shape[1] != shape[2]:
            raise InvalidInputError(f"image_shape: the cnn needs square images, got {list(shape)}")
        values = table.column(cfg.image_column).to_pylist()
        data.inputs["image"] = datasets.image_files(values, shape[1], shape[0])
        pre.update(image_column=cfg.image_column, image_shape=list(shape), scale=1 / 255)
        defaults["image"] = branch_defaults("image", in_channels=shape[0], image_size=shape[1])
    if cfg.text_column:
        from aifab.models.tokenizer import train_bpe_tokenizer

        texts = [str(t) if t is not None else "" for t in table.column(cfg.text_column).to_pylist()]
        tok = train_bpe_tokenizer((texts[i] for i in data.index["train"]), cfg.vocab_size)
        data.tokenizer = tok
        data.inputs.update(datasets.tokenize(texts, tok, cfg.max_length))
        pre.update(text_column=cfg.text_column, max_length=cfg.max_length)
        defaults["text"] = branch_defaults(
            "text",
            vocab_size=len(tok),
            max_len=cfg.max_length,
            pad_token_id=int(tok.pad_token_id or 0),
        )
    if isinstance(cfg.features, list) and cfg.features:
        x = datasets.numeric_matrix(table, cfg.features)
        pre["features"] = list(cfg.features)
        if cfg.standardize:
            scaler = datasets.Standardizer.fit(x[data.index["train"]])
            x = scaler(x)
            pre["standardize"] = scaler.to_dict()
        data.inputs["features"] = np.ascontiguousarray(x, dtype=np.float32)
        defaults["tabular"] = branch_defaults("tabular", in_features=x.shape[1])
    data.model_defaults = defaults


def merge_config(defaults: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Zoo config from the data's sizes and the user's keys, merged one level into branches.

    A user's ``image: {channels: [32, 64]}`` keeps the image size the data decided; a user's
    ``text: null`` drops nothing the data needs (the branch stays).
    """
    out = dict(defaults)
    for key, value in overrides.items():
        base = out.get(key)
        if isinstance(base, dict) and isinstance(value, dict):
            out[key] = {**base, **value}
        elif not (isinstance(base, dict) and value is None):
            out[key] = value
    return out
