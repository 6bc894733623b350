"""Config keys the training recipes share: checkpoints, seeding, device, tracking, output, registry.

Each recipe's ``Config`` subclasses :class:`RecipeConfig`, adds its own keys and overrides a
shared one only where its meaning differs (kge checkpoints every N epochs, not steps).
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from aifab.core.config import StrictConfig


class OptimConfig(StrictConfig):
    """AdamW with linear warmup then cosine decay."""

    lr: float = Field(1e-3, gt=0, description="Peak learning rate.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW decoupled weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    warmup_steps: int = Field(0, ge=0, description="Optimizer steps of linear warmup.")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Final LR as a share of lr.")
    grad_accum: int = Field(1, ge=1, description="Micro-batches per optimizer step.")
    clip_norm: float | None = Field(1.0, gt=0, description="Max global grad norm (null: off).")


class RecipeConfig(StrictConfig):
    """The keys of every training recipe's config (classify, lm, lora, kge)."""

    # ``register`` would shadow BaseModel.register, so the field is ``register_as`` with the
    # YAML key ``register``; dumps use the alias.
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    checkpoint_every: int | None = Field(None, ge=1, description="Steps between checkpoints.")
    checkpoint_dir: str | None = Field(None, description="Default: $AIFAB_CHECKPOINT_DIR.")
    keep_checkpoints: int = Field(2, ge=1, description="Checkpoints kept on disk.")
    seed: int = 0
    deterministic: bool = Field(False, description="Deterministic kernels, fixed threads.")
    threads: int | None = Field(None, ge=1, description="Torch threads (deterministic: 1).")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    run_name: str | None = None
    system_metrics: bool = Field(True, description="Log CPU/memory/GPU use.")
    progress: bool = Field(
        True, description="Progress: a live bar on a terminal, else plain lines (job logs)."
    )
    progress_every_s: float = Field(
        10.0, ge=0, description="Seconds between plain progress lines (0: every step)."
    )
    output_dir: str | None = Field(None, description="Model directory (default: artifacts).")
    register_as: str | None = Field(
        None, alias="register", description="Register the model under this name."
    )
    alias: str | None = Field(None, description="Alias for the registered version.")
