"""Configs of the multimodal zoo models: the late-fusion classifier and the dual encoder.

Each branch reuses a single-modality zoo model (cnn, transformer-classifier, mlp) with its
head sized to the shared embedding width, so a branch trains the same way it does alone.
Configs only: listing the zoo never imports torch.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from aifab.core.config import StrictConfig


class ImageBranch(StrictConfig):
    """The image branch: a zoo cnn whose head outputs the embedding."""

    in_channels: int = Field(3, gt=0, description="Image channels (1 grey, 3 RGB).")
    image_size: int = Field(32, gt=0, description="Height and width of the (square) image.")
    channels: list[int] = Field(
        default_factory=lambda: [16, 32], min_length=1, description="Channels per conv stage."
    )


class TextBranch(StrictConfig):
    """The text branch: a zoo transformer-classifier whose head outputs the embedding."""

    vocab_size: int = Field(512, gt=0, description="Tokenizer vocabulary size.")
    d_model: int = Field(64, gt=0, description="Embedding and hidden width.")
    layers: int = Field(1, gt=0, description="Encoder layers.")
    heads: int = Field(4, gt=0, description="Attention heads (must divide d_model).")
    dim_feedforward: int = Field(128, gt=0, description="Feed-forward width.")
    max_len: int = Field(32, gt=0, description="Longest token sequence.")
    pad_token_id: int = Field(0, ge=0, description="Padding token id.")


class TabularBranch(StrictConfig):
    """The tabular branch: a zoo mlp whose output layer is the embedding."""

    in_features: int = Field(..., gt=0, description="Number of input features.")
    hidden: list[int] = Field(default_factory=lambda: [32], description="Hidden widths.")


class FusionClassifierConfig(StrictConfig):
    """Late fusion: per-modality encoders (cnn, transformer, mlp), concatenated, an MLP head."""

    num_classes: int = Field(2, gt=0, description="Number of output classes.")
    image: ImageBranch | None = Field(None, description="Image branch (None: no image input).")
    text: TextBranch | None = Field(None, description="Text branch (None: no text input).")
    tabular: TabularBranch | None = Field(None, description="Tabular branch (None: no fields).")
    embed_dim: int = Field(64, gt=0, description="Width each branch outputs before fusion.")
    hidden: int = Field(128, gt=0, description="Hidden width of the fusion head.")
    dropout: float = Field(0.1, ge=0.0, lt=1.0, description="Dropout in branches and head.")

    @model_validator(mode="after")
    def _one_branch(self) -> FusionClassifierConfig:
        if self.image is None and self.text is None and self.tabular is None:
            raise ValueError("give at least one of image, text, tabular")
        return self

    def modalities(self) -> list[str]:
        """The branches present, in the order their embeddings are concatenated."""
        return [m for m in ("image", "text", "tabular") if getattr(self, m) is not None]


class DualEncoderConfig(StrictConfig):
    """CLIP-style dual encoder: an image cnn and a text transformer in one embedding space."""

    image: ImageBranch = Field(default_factory=ImageBranch, description="Image tower.")
    text: TextBranch = Field(default_factory=TextBranch, description="Text tower.")
    embed_dim: int = Field(64, gt=0, description="Shared embedding width (L2-normalised).")
    init_temperature: float = Field(
        0.07, gt=0.0, description="Initial softmax temperature (learned, as CLIP)."
    )


def branch_defaults(kind: str, **sizes: Any) -> dict[str, Any]:
    """A branch config dict from sizes the data decides (used by the classify recipe)."""
    branches: dict[str, type[StrictConfig]] = {
        "image": ImageBranch,
        "text": TextBranch,
        "tabular": TabularBranch,
    }
    cls = branches[kind]
    return {k: v for k, v in sizes.items() if k in cls.model_fields}
