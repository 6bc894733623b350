"""The ``fusion-classifier`` and ``dual-encoder`` zoo models over images, text and fields.

Both are built from the single-modality zoo models (cnn, transformer-classifier, mlp) with
their heads resized to the embedding width, so each branch is the model that modality trains
alone. The fusion classifier concatenates the branch embeddings (late fusion) and classifies
them with an MLP head; the dual encoder maps images and texts into one L2-normalised space
and scores every image against every text (CLIP).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from aifab.models.cnn import build_cnn
from aifab.models.mlp import build_mlp
from aifab.models.transformer import TransformerClassifier
from aifab.models.zoo import CNNConfig, MLPConfig, TransformerClassifierConfig
from aifab.models.zoo_multimodal import (
    DualEncoderConfig,
    FusionClassifierConfig,
    ImageBranch,
    TabularBranch,
    TextBranch,
)

#: The keyword inputs of each modality, as the classify recipe and serving name them.
INPUTS = {
    "image": ("image",),
    "text": ("input_ids", "attention_mask"),
    "tabular": ("features",),
}


def _image_tower(cfg: ImageBranch, out: int, dropout: float) -> nn.Module:
    cnn = CNNConfig(
        in_channels=cfg.in_channels,
        image_size=cfg.image_size,
        num_classes=out,
        channels=cfg.channels,
        dropout=dropout,
    )
    return build_cnn(cnn)


def _text_tower(cfg: TextBranch, out: int, dropout: float) -> nn.Module:
    tc = TransformerClassifierConfig(**cfg.model_dump(), num_classes=out, dropout=dropout)
    return TransformerClassifier(tc)


def _tabular_tower(cfg: TabularBranch, out: int, dropout: float) -> nn.Module:
    mlp = MLPConfig(in_features=cfg.in_features, hidden=cfg.hidden, out_features=out)
    return build_mlp(mlp)


class FusionClassifier(nn.Module):
    """Late fusion over any mix of image, text and tabular inputs.

    Args:
        config: The validated config; a branch that is None takes no input.
    """

    def __init__(self, config: FusionClassifierConfig) -> None:
        super().__init__()
        self.modalities = config.modalities()
        d, p = config.embed_dim, config.dropout
        self.image = _image_tower(config.image, d, p) if config.image else None
        self.text = _text_tower(config.text, d, p) if config.text else None
        self.tabular = _tabular_tower(config.tabular, d, p) if config.tabular else None
        self.head = nn.Sequential(
            nn.GELU(),
            nn.Dropout(p),
            nn.Linear(d * len(self.modalities), config.hidden),
            nn.GELU(),
            nn.Dropout(p),
            nn.Linear(config.hidden, config.num_classes),
        )

    def embed(
        self,
        image: torch.Tensor | None = None,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        features: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Each present branch's ``(batch, embed_dim)`` embedding, by modality."""
        out: dict[str, torch.Tensor] = {}
        if self.image is not None:
            out["image"] = self.image(_needed(image, "image"))
        if self.text is not None:
            out["text"] = self.text(_needed(input_ids, "input_ids"), attention_mask)
        if self.tabular is not None:
            out["tabular"] = self.tabular(_needed(features, "features"))
        return out

    def forward(
        self,
        image: torch.Tensor | None = None,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        features: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``(batch, num_classes)`` logits from the inputs of every branch present.

        Args:
            image: ``(batch, channels, size, size)`` floats in [0, 1].
            input_ids: ``(batch, seq)`` token ids.
            attention_mask: ``(batch, seq)``, 1 for real tokens.
            features: ``(batch, in_features)`` standardized fields.
        """
        parts = self.embed(image, input_ids, attention_mask, features)
        logits: torch.Tensor = self.head(torch.cat([parts[m] for m in self.modalities], dim=1))
        return logits


def _needed(value: torch.Tensor | None, name: str) -> torch.Tensor:
    if value is None:
        raise ValueError(f"the model needs the {name!r} input")
    return value


class DualEncoder(nn.Module):
    """Image and text towers into one L2-normalised space, with a learned temperature.

    Args:
        config: The validated config.
    """

    def __init__(self, config: DualEncoderConfig) -> None:
        super().__init__()
        self.image = _image_tower(config.image, config.embed_dim, 0.0)
        self.text = _text_tower(config.text, config.embed_dim, 0.0)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / config.init_temperature)))

    def encode_image(self, image: torch.Tensor) -> torch.Tensor:
        """``(batch, embed_dim)`` unit vectors of images."""
        return nn.functional.normalize(self.image(image), dim=-1)

    def encode_text(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``(batch, embed_dim)`` unit vectors of token sequences."""
        return nn.functional.normalize(self.text(input_ids, attention_mask), dim=-1)

    def forward(
        self,
        image: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``(batch, batch)`` image-to-text logits; the diagonal pairs belong together."""
        scale = self.logit_scale.clamp(max=math.log(100.0)).exp()
        logits: torch.Tensor = (
            scale * self.encode_image(image) @ self.encode_text(input_ids, attention_mask).T
        )
        return logits


def contrastive_loss(logits: torch.Tensor) -> torch.Tensor:
    """CLIP's symmetric cross-entropy over a square image-text logit matrix."""
    target = torch.arange(logits.shape[0], device=logits.device)
    i2t = nn.functional.cross_entropy(logits, target)
    t2i = nn.functional.cross_entropy(logits.T, target)
    return (i2t + t2i) / 2


def build_fusion_classifier(config: FusionClassifierConfig) -> FusionClassifier:
    """Build a :class:`FusionClassifier` from its config."""
    return FusionClassifier(config)


def build_dual_encoder(config: DualEncoderConfig) -> DualEncoder:
    """Build a :class:`DualEncoder` from its config."""
    return DualEncoder(config)
