"""The ``classify`` recipe's config: dataset, columns, modality, model, optimization.

Apart from the recipe (``aifab.train.recipes.classify``) so that the recipe's shared pieces
(``aifab.train.classification``, ``aifab.train.multimodal_data``) can name it without an import
cycle.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from aifab.core.config import StrictConfig
from aifab.train.recipe_config import OptimConfig, RecipeConfig

__all__ = ["ClassifyConfig", "EarlyStopConfig", "ModelChoice"]


class EarlyStopConfig(StrictConfig):
    """Stop when the validation metric stops improving."""

    metric: Literal["valid_accuracy", "valid_loss"] = "valid_accuracy"
    patience: int = Field(5, ge=1, description="Evaluations without improvement before stopping.")
    min_delta: float = Field(0.0, ge=0, description="Smallest change that counts as better.")
    restore_best: bool = Field(True, description="End with the best evaluated weights.")


class ModelChoice(StrictConfig):
    """Which zoo model, with config keys that override the ones inferred from the data."""

    name: Literal["auto", "mlp", "cnn", "transformer-classifier", "fusion-classifier"] = Field(
        "auto",
        description="auto: mlp for tabular, cnn for images, transformer-classifier for text, "
        "fusion-classifier for multimodal.",
    )
    config: dict[str, Any] = Field(default_factory=dict, description="Zoo config overrides.")


class ClassifyConfig(RecipeConfig):
    """Everything the classify recipe reads (shipped YAML files are instances of it).

    The keys every recipe shares (checkpoints, seed, device, run, output) are RecipeConfig's.
    The recipe's ``Config`` adds the pre-job input check; the shared pieces
    (``aifab.train.classification``) take this class, so they do not import the recipe.
    """

    dataset: str = Field(..., description="Dataset ref (NAME or NAME@VERSION).")
    label: str = Field("label", description="Label column.")
    features: list[str] | dict[str, Any] | str | None = Field(
        None,
        description="Feature columns; or a feature spec (aifab data features) fitted here; or a "
        "fitted feature transform (name, digest or artifact path). Default: numeric columns.",
    )
    modality: Literal["auto", "tabular", "image", "text", "multimodal"] = Field(
        "auto",
        description="auto: multimodal with text_column and image_column, text with "
        "text_column, image with image_column/shape. multimodal fuses any mix of "
        "image_column, text_column and a features list (fusion-classifier).",
    )
    text_column: str | None = Field(None, description="Text column (text classification).")
    image_column: str | None = Field(
        None, description="Column of images: file paths, or image bytes in the lake."
    )
    image_shape: tuple[int, int, int] | None = Field(
        None,
        description="[channels, height, width] of the model input: pixel columns are reshaped "
        "to it, image files resized to it (default [3, 32, 32] for files; square only).",
    )
    standardize: bool = Field(True, description="Standardize plain feature columns (train stats).")
    split_column: str = Field("split", description="train/valid/test column, if present.")
    split_fractions: tuple[float, float, float] = Field(
        (0.8, 0.1, 0.1), description="Seeded split shares when there is no split column."
    )
    vocab_size: int = Field(1000, ge=300, description="Text: BPE vocabulary (trained on train).")
    max_length: int = Field(64, gt=0, description="Text: tokens per example.")
    model: ModelChoice = Field(default_factory=ModelChoice)
    base_model: str | None = Field(None, description="Saved model directory to fine-tune.")
    epochs: int = Field(10, ge=1, description="Passes over the training rows.")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many optimizer steps.")
    batch_size: int = Field(32, ge=1, description="Global batch (split over replicas).")
    optim: OptimConfig = Field(default_factory=OptimConfig)
    eval_every: int | None = Field(None, ge=1, description="Steps between evals (default: epoch).")
    early_stopping: EarlyStopConfig | None = None
    bf16: bool | None = Field(
        None, description="bf16 autocast; default on for GPUs that support it, off on CPU."
    )
    strategy: Literal["ddp", "fsdp", "deepspeed"] = Field("ddp", description="Data parallelism.")
    deepspeed: dict[str, Any] | None = Field(None, description="DeepSpeed config (ZeRO...).")
    experiment: str = Field("classify", description="MLflow experiment.")
    log_every: int = Field(10, ge=1, description="Steps between train-loss points.")
