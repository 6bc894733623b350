"""The ``cnn`` zoo model: conv-BN-ReLU-pool stages and a linear head for small images."""

from __future__ import annotations

from torch import nn

from aifab.models.zoo import CNNConfig


def build_cnn(config: CNNConfig) -> nn.Sequential:
    """Build one ``3x3 conv -> BatchNorm -> ReLU -> 2x2 max-pool`` stage per channel count.

    Pooling stops once the feature map is 1x1, so deep configs still fit tiny images
    (8x8 sklearn digits, 28x28 MNIST, 32x32 CIFAR).

    Args:
        config: The validated CNN config.

    Returns:
        A module mapping ``(batch, in_channels, image_size, image_size)`` floats to
        ``(batch, num_classes)`` logits.
    """
    layers: list[nn.Module] = []
    channels, size = config.in_channels, config.image_size
    for out in config.channels:
        layers += [
            nn.Conv2d(channels, out, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out),
            nn.ReLU(),
        ]
        if size >= 2:
            layers.append(nn.MaxPool2d(2))
            size //= 2
        channels = out
    layers += [
        nn.Flatten(),
        nn.Dropout(config.dropout),
        nn.Linear(channels * size * size, config.num_classes),
    ]
    return nn.Sequential(*layers)
