"""The model zoo: builder names, their typed configs, and ``build_model``.

Configs live here (not beside the torch code) so listing the zoo never imports torch.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from aifab.core.config import StrictConfig, as_config
from aifab.core.errors import InvalidInputError
from aifab.core.registry import Registry
from aifab.models.zoo_multimodal import DualEncoderConfig, FusionClassifierConfig

if TYPE_CHECKING:
    import torch


def _divides(name: str, other: str, value: int, info: ValidationInfo) -> int:
    """Check that ``value`` divides the already-validated field ``other``."""
    total = info.data.get(other)
    if isinstance(total, int) and total % value:
        raise ValueError(f"{name} ({value}) must divide {other} ({total})")
    return value


def _all_positive(what: str, value: list[int]) -> list[int]:
    """Check that every entry of a list of sizes is > 0."""
    if any(v <= 0 for v in value):
        raise ValueError(f"every {what} must be > 0")
    return value


class MLPConfig(StrictConfig):
    """A multi-layer perceptron for tabular features."""

    in_features: int = Field(64, gt=0, description="Number of input features.")
    hidden: list[int] = Field(
        default_factory=lambda: [128, 64], description="Width of each hidden layer, in order."
    )
    out_features: int = Field(10, gt=0, description="Outputs (classes, or 1 for regression).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout after each hidden layer.")
    activation: Literal["relu", "gelu", "tanh", "silu"] = Field(
        "relu", description="Activation after each hidden layer."
    )

    @field_validator("hidden")
    @classmethod
    def _positive_widths(cls, value: list[int]) -> list[int]:
        return _all_positive("hidden width", value)


class CNNConfig(StrictConfig):
    """A small convolutional image classifier (conv-BN-ReLU-pool stages, linear head)."""

    in_channels: int = Field(1, gt=0, description="Image channels (1 grey, 3 RGB).")
    image_size: int = Field(8, gt=0, description="Height and width of the (square) input image.")
    num_classes: int = Field(10, gt=0, description="Number of output classes.")
    channels: list[int] = Field(
        default_factory=lambda: [32, 64],
        min_length=1,
        description="Output channels of each conv stage; each stage halves the image size.",
    )
    dropout: float = Field(0.1, ge=0.0, lt=1.0, description="Dropout before the linear head.")

    @field_validator("channels")
    @classmethod
    def _positive_channels(cls, value: list[int]) -> list[int]:
        return _all_positive("channel count", value)


class TransformerClassifierConfig(StrictConfig):
    """A text classifier: token + position embeddings, a Transformer encoder, mean pooling."""

    vocab_size: int = Field(512, gt=0, description="Tokenizer vocabulary size.")
    num_classes: int = Field(2, gt=0, description="Number of output classes.")
    d_model: int = Field(64, gt=0, description="Embedding and hidden width.")
    layers: int = Field(2, gt=0, description="Number of encoder layers.")
    heads: int = Field(4, gt=0, description="Attention heads per layer (must divide d_model).")
    dim_feedforward: int = Field(128, gt=0, description="Width of each feed-forward block.")
    max_len: int = Field(128, gt=0, description="Longest token sequence the model accepts.")
    dropout: float = Field(0.1, ge=0.0, lt=1.0, description="Dropout inside the encoder.")
    pad_token_id: int = Field(0, ge=0, description="Token id of padding (ignored by pooling).")

    @field_validator("heads")
    @classmethod
    def _heads_divide(cls, value: int, info: ValidationInfo) -> int:
        return _divides("heads", "d_model", value, info)


#: Causal-LM size presets; "tiny" is the field defaults (tests), "small" ~12.6M parameters
#: (LoRA benchmark), "base" ~41M.
CAUSAL_LM_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {
        "vocab_size": 512,
        "hidden_size": 64,
        "layers": 2,
        "heads": 4,
        "kv_heads": 2,
        "intermediate_size": 128,
        "max_position_embeddings": 256,
    },
    "small": {
        "vocab_size": 8192,
        "hidden_size": 384,
        "layers": 6,
        "heads": 6,
        "kv_heads": 2,
        "intermediate_size": 1024,
        "max_position_embeddings": 1024,
    },
    "base": {
        "vocab_size": 32000,
        "hidden_size": 512,
        "layers": 8,
        "heads": 8,
        "kv_heads": 8,
        "intermediate_size": 1376,
        "max_position_embeddings": 2048,
    },
}


class CausalLMConfig(StrictConfig):
    """A Llama-style decoder-only language model (transformers LlamaForCausalLM)."""

    preset: Literal["tiny", "small", "base"] = Field(
        "tiny",
        description="Size preset (tiny ~0.1M, small ~12.6M, base ~41M parameters); "
        "fields given explicitly override it.",
    )
    vocab_size: int = Field(512, gt=0, description="Tokenizer vocabulary size.")
    hidden_size: int = Field(64, gt=0, description="Hidden width.")
    layers: int = Field(2, gt=0, description="Number of decoder layers.")
    heads: int = Field(4, gt=0, description="Attention heads (must divide hidden_size).")
    kv_heads: int = Field(2, gt=0, description="Key/value heads, grouped-query (divides heads).")
    intermediate_size: int = Field(128, gt=0, description="Width of each SwiGLU MLP.")
    max_position_embeddings: int = Field(256, gt=0, description="Longest context in tokens.")
    tie_embeddings: bool = Field(True, description="Share input embedding and output head.")
    pad_token_id: int = Field(0, ge=0, description="Padding token id (tokenizer default: 0).")
    bos_token_id: int = Field(1, ge=0, description="Beginning-of-sequence id (default: 1).")
    eos_token_id: int = Field(2, ge=0, description="End-of-sequence id (default: 2).")
    copy_head: bool = Field(
        False,
        description="Add a copy (pointer-generator) head: each next token mixes the LM's "
        "distribution with a pointer to a token of the context, so a tiny model copies values "
        "it never saw in training (tool-call arguments). Builds CopyLlamaForCausalLM.",
    )

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        # Preset values fill only the keys the user left out.
        if isinstance(data, Mapping):
            preset = CAUSAL_LM_PRESETS.get(str(data.get("preset", "tiny")))
            if preset is not None:
                return {**preset, **data}
        return data

    @field_validator("heads")
    @classmethod
    def _heads_divide(cls, value: int, info: ValidationInfo) -> int:
        return _divides("heads", "hidden_size", value, info)

    @field_validator("kv_heads")
    @classmethod
    def _kv_heads_divide(cls, value: int, info: ValidationInfo) -> int:
        return _divides("kv_heads", "heads", value, info)


class RotatEConfig(StrictConfig):
    """RotatE knowledge-graph embeddings: relations are rotations in complex space."""

    num_entities: int = Field(..., gt=0, description="Number of entities in the graph.")
    num_relations: int = Field(..., gt=0, description="Number of relation types.")
    dim: int = Field(64, gt=0, description="Complex embedding dimension.")
    gamma: float = Field(6.0, gt=0.0, description="Margin of the self-adversarial loss.")
    adversarial_temperature: float = Field(
        1.0, ge=0.0, description="Temperature weighting hard negatives in the loss (0 = uniform)."
    )


class TransEConfig(StrictConfig):
    """TransE knowledge-graph embeddings: relations are translations, h + r ~ t."""

    num_entities: int = Field(..., gt=0, description="Number of entities in the graph.")
    num_relations: int = Field(..., gt=0, description="Number of relation types.")
    dim: int = Field(64, gt=0, description="Embedding dimension.")
    p_norm: Literal[1, 2] = Field(1, description="Norm of the distance ||h + r - t||_p.")
    margin: float = Field(1.0, gt=0.0, description="Margin of the ranking loss.")


#: name -> (task, config class, builder); builders are imported lazily, through ``ZOO``.
_SPECS: dict[str, tuple[str, type[StrictConfig], str]] = {
    "mlp": ("tabular", MLPConfig, "aifab.models.mlp:build_mlp"),
    "cnn": ("image", CNNConfig, "aifab.models.cnn:build_cnn"),
    "transformer-classifier": (
        "text",
        TransformerClassifierConfig,
        "aifab.models.transformer:build_transformer_classifier",
    ),
    "fusion-classifier": (
        "multimodal",
        FusionClassifierConfig,
        "aifab.models.fusion:build_fusion_classifier",
    ),
    "dual-encoder": ("multimodal", DualEncoderConfig, "aifab.models.fusion:build_dual_encoder"),
    "causal-lm": ("lm", CausalLMConfig, "aifab.models.causal_lm:build_causal_lm"),
    "rotate": ("kg", RotatEConfig, "aifab.models.kge:build_rotate"),
    "transe": ("kg", TransEConfig, "aifab.models.kge:build_transe"),
}

ZOO = Registry("model", {name: builder for name, (_, _, builder) in _SPECS.items()})


def _spec(name: str) -> tuple[str, type[StrictConfig]]:
    if name not in _SPECS:
        raise InvalidInputError(f"unknown model {name!r} (known: {', '.join(sorted(_SPECS))})")
    task, cls, _ = _SPECS[name]
    return task, cls


def task_of(name: str) -> str:
    """The task of zoo model ``name``: tabular, image, text, lm or kg."""
    return _spec(name)[0]


def model_config(name: str, config: StrictConfig | Mapping[str, Any] | None = None) -> StrictConfig:
    """Validate ``config`` for the zoo model ``name``.

    Args:
        name: A zoo name (``list_zoo()``).
        config: A mapping (missing keys take their defaults), a config instance, or None.

    Returns:
        The validated, frozen config.

    Raises:
        InvalidInputError: Unknown model name, or a bad key/value (the message names the key,
            e.g. ``model config (mlp): hiden: unknown key``).
    """
    _, cls = _spec(name)
    if isinstance(config, StrictConfig) and not isinstance(config, cls):
        config = config.model_dump()
    return as_config(cls, config, source=f"model config ({name})")


def build_model(
    name: str, config: StrictConfig | Mapping[str, Any] | None = None
) -> torch.nn.Module:
    """Build a fresh (randomly initialised) ``torch.nn.Module`` from the zoo.

    Args:
        name: A zoo name: mlp, cnn, transformer-classifier, causal-lm, rotate, transe.
        config: The model config (validated with :func:`model_config`).

    Returns:
        The module, in training mode.
    """
    cfg = model_config(name, config)
    module: torch.nn.Module = ZOO.get(name)(cfg)
    return module


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type) and not isinstance(annotation, types.GenericAlias):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _plain(value: Any) -> Any:
    """A default as JSON-ready data (a nested config, e.g. a fusion branch, as its dict)."""
    return value.model_dump() if isinstance(value, StrictConfig) else value


def config_fields(cls: type[StrictConfig]) -> list[dict[str, Any]]:
    """Describe each field of a config class: name, type, default, required, description."""
    fields = []
    for fname, info in cls.model_fields.items():
        required = info.is_required()
        fields.append(
            {
                "name": fname,
                "type": _type_name(info.annotation),
                "default": None
                if required
                else _plain(info.get_default(call_default_factory=True)),
                "required": required,
                "description": info.description or "",
            }
        )
    return fields


def list_zoo() -> list[dict[str, Any]]:
    """Every zoo model: name, task, description and config fields (imports no torch)."""
    return [
        {
            "name": name,
            "task": task,
            "description": (cls.__doc__ or "").strip(),
            "fields": config_fields(cls),
        }
        for name, (task, cls, _) in _SPECS.items()
    ]
