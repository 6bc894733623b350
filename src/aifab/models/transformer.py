"""The ``transformer-classifier`` zoo model: a Transformer encoder over token ids, mean-pooled."""

from __future__ import annotations

import torch
from torch import nn

from aifab.models.zoo import TransformerClassifierConfig


class TransformerClassifier(nn.Module):
    """Token + learned position embeddings, a pre-norm encoder, masked mean pooling, a head.

    Args:
        config: The validated config.
    """

    def __init__(self, config: TransformerClassifierConfig) -> None:
        super().__init__()
        self.max_len = config.max_len
        self.pad_token_id = config.pad_token_id
        self.tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = nn.Embedding(config.max_len, config.d_model)
        layer = nn.TransformerEncoderLayer(
            config.d_model,
            config.heads,
            dim_feedforward=config.dim_feedforward,
            dropout=config.dropout,
            batch_first=True,
            norm_first=True,  # pre-norm trains stably without warm-up on small data
        )
        # Nested tensors do not apply to pre-norm layers; asking for them only warns.
        self.encoder = nn.TransformerEncoder(layer, config.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.num_classes)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Classify token sequences.

        Args:
            input_ids: ``(batch, seq)`` token ids, ``seq <= max_len``.
            attention_mask: ``(batch, seq)``, 1 for real tokens and 0 for padding; defaults
                to ``input_ids != pad_token_id``.

        Returns:
            ``(batch, num_classes)`` logits.
        """
        seq = input_ids.shape[1]
        if seq > self.max_len:
            raise ValueError(f"sequence length {seq} exceeds max_len {self.max_len}")
        if attention_mask is None:
            attention_mask = input_ids != self.pad_token_id
        keep = attention_mask.bool()
        pos = torch.arange(seq, device=input_ids.device)
        x = self.tokens(input_ids) + self.positions(pos)[None]
        x = self.norm(self.encoder(x, src_key_padding_mask=~keep))
        # An all-padding row attends to nothing and comes out NaN: zero it before pooling.
        x = x.masked_fill(~keep[..., None], 0.0)
        pooled = x.sum(dim=1) / keep.sum(dim=1, keepdim=True).clamp(min=1)
        logits: torch.Tensor = self.head(pooled)
        return logits


def build_transformer_classifier(config: TransformerClassifierConfig) -> TransformerClassifier:
    """Build a :class:`TransformerClassifier` from its config."""
    return TransformerClassifier(config)
