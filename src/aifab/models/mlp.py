"""The ``mlp`` zoo model: a multi-layer perceptron over tabular feature vectors."""

from __future__ import annotations

from torch import nn

from aifab.models.zoo import MLPConfig

_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "tanh": nn.Tanh,
    "silu": nn.SiLU,
}


def build_mlp(config: MLPConfig) -> nn.Sequential:
    """Build ``Linear -> activation -> dropout`` per hidden layer, then a linear output.

    Args:
        config: The validated MLP config.

    Returns:
        A module mapping ``(batch, in_features)`` floats to ``(batch, out_features)`` logits.
    """
    layers: list[nn.Module] = []
    width = config.in_features
    for hidden in config.hidden:
        layers += [nn.Linear(width, hidden), _ACTIVATIONS[config.activation]()]
        if config.dropout > 0:
            layers.append(nn.Dropout(config.dropout))
        width = hidden
    layers.append(nn.Linear(width, config.out_features))
    return nn.Sequential(*layers)
