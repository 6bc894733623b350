"""The ``lm`` recipe: pre-train a zoo ``causal-lm`` on a dataset version's text column.

A byte-level BPE tokenizer is trained on the train split; text is packed into blocks; AdamW with
warmup/cosine; periodic validation loss; exact resume; MLflow tracking.

Read top to bottom: validate -> data -> model -> resume -> the loop -> evaluate -> save, log,
register. ``python -m aifab.train.recipes.lm config.yaml [key=value ...]`` runs it.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from aifab.core.config import as_config
from aifab.core.errors import InvalidInputError
from aifab.models.tokenizer import PreTokenizer
from aifab.train.lifecycle import (
    TrainState,
    attach_run,
    check_batch,
    ending,
    lineage_meta,
    log_metrics,
    optimizer_step,
    output_dir,
    publish,
    resolve_dataset,
    run_distributed,
    summary,
)
from aifab.train.recipe_config import OptimConfig, RecipeConfig

if TYPE_CHECKING:
    import torch

    from aifab.data.catalog import VersionInfo
    from aifab.train.distributed import DistInfo
    from aifab.train.text_data import LMBlocks


def _default_optim() -> OptimConfig:
    return OptimConfig(lr=3e-3, weight_decay=0.1, warmup_steps=20, min_lr_ratio=0.1)


class Config(RecipeConfig):
    """Everything the lm recipe reads (shipped YAML files are instances of it).

    The keys every recipe shares (checkpoints, seed, device, run, output) are RecipeConfig's.
    """

    dataset: str = Field(..., description="Dataset ref (NAME or NAME@VERSION) with a text column.")
    text_column: str = Field("text", description="Column of raw text.")
    split_column: str = Field("split", description="train/valid/test column (else 80/10/10).")
    model: dict[str, Any] = Field(
        default_factory=lambda: {"preset": "tiny"},
        description="causal-lm zoo config (preset + overrides); vocab size comes from the "
        "tokenizer.",
    )
    vocab_size: int = Field(512, ge=300, description="BPE vocabulary trained on the train split.")
    pre_tokenizer: PreTokenizer = Field(
        "words",
        description="How the BPE tokenizer cuts text before merging: words (GPT-2's rule, a "
        "word keeps its leading space) or isolated (every space, punctuation mark and digit on "
        "its own, so a value is the same tokens in a request and in a JSON tool call: an LM "
        "that must copy values learns it far sooner).",
    )
    block_size: int = Field(128, ge=8, description="Tokens per packed training block.")
    batch_size: int = Field(16, ge=1, description="Blocks per micro-batch (split over replicas).")
    max_steps: int = Field(500, ge=1, description="Optimizer steps to train.")
    optim: OptimConfig = Field(default_factory=_default_optim)
    eval_every: int = Field(100, ge=1, description="Steps between validation-loss evaluations.")
    eval_blocks: int | None = Field(
        None, ge=1, description="Validation blocks per periodic eval (default: all)."
    )
    bf16: bool = Field(False, description="bf16 autocast (CPU and Ampere+ GPUs).")
    experiment: str = Field("lm", description="MLflow experiment.")
    log_every: int = Field(10, ge=1, description="Steps between train-loss points.")

    def check_inputs(self) -> None:
        """Check the dataset and its text column before a job starts."""
        version = resolve_dataset(self.dataset)
        if self.text_column not in version.columns:
            raise InvalidInputError(
                f"text_column: dataset {version.ref} has no column {self.text_column!r} "
                f"(columns: {', '.join(version.columns)})"
            )


def main(config: Mapping[str, Any] | Config | str | Path) -> dict[str, Any]:
    """Pre-train a causal LM; return ``run_id``, ``metrics``, ``model_dir``, ``model_version``.

    With several replicas (RANK/WORLD_SIZE set by the scheduler) each trains on its shard of
    every global batch of ``batch_size`` blocks; rank 0 alone logs, checkpoints and saves.
    """
    cfg = as_config(Config, config, source="lm config")
    return run_distributed(cfg.device, lambda info, device: _run(cfg, info, device))


def _run(cfg: Config, info: DistInfo, device: torch.device) -> dict[str, Any]:
    from aifab.train import checkpointing, distributed, loop
    from aifab.train.datasets import dataset_input

    loop.set_deterministic(cfg.deterministic, cfg.threads)
    loop.seed_everything(cfg.seed)
    check_batch(cfg.batch_size, info)
    cfg.check_inputs()
    version = resolve_dataset(cfg.dataset)
    ckpt_dir = checkpointing.checkpoint_dir(cfg.checkpoint_dir)
    # Rank 0 trains the tokenizer and packs the blocks; the others get the very same ones.
    prepared = _prepare_data(cfg, version, ckpt_dir) if info.is_main else None
    tokenizer, data = distributed.broadcast_object(prepared, info)
    model_cfg = _model_config(cfg, tokenizer)
    state = _setup(cfg, model_cfg, info, device)
    state.resume(ckpt_dir)
    run = attach_run(state, "lm", cfg, lambda: [dataset_input(version)])
    with ending(run):
        timing = _train(cfg, state, data, device, run, ckpt_dir)
        metrics = _final_metrics(cfg, state, data, device, timing) if state.is_main else {}
        out = summary(state, cfg, distributed.broadcast_object(metrics, info), steps=state.step)
        if run is not None:
            run.log_metrics(metrics, state.step)
            model_dir = _save(cfg, state, tokenizer, model_cfg, version, metrics)
            out["model_dir"] = str(model_dir)
            out["model_version"] = publish(
                run, model_dir, recipe="lm", cfg=cfg, dataset_ref=version.ref
            )
        return out


def _prepare_data(cfg: Config, version: VersionInfo, ckpt_dir: Path | None) -> tuple[Any, LMBlocks]:
    """Train the tokenizer on the train split (or reload the one a checkpoint run saved)."""
    from aifab.models.tokenizer import load_tokenizer, train_bpe_tokenizer
    from aifab.train.text_data import lm_blocks, split_texts

    texts = split_texts(version, cfg.text_column, cfg.split_column, seed=cfg.seed)
    saved = ckpt_dir / "tokenizer" if ckpt_dir is not None else None
    if saved is not None and (saved / "tokenizer.json").is_file():
        tokenizer = load_tokenizer(saved)
    else:
        tokenizer = train_bpe_tokenizer(
            texts["train"], cfg.vocab_size, pre_tokenizer=cfg.pre_tokenizer
        )
        if saved is not None:  # a resumed run must see the very same token ids
            tokenizer.save_pretrained(str(saved))
    return tokenizer, lm_blocks(tokenizer, texts, cfg.block_size)


def _model_config(cfg: Config, tokenizer: Any) -> Any:
    """The causal-lm config: the user's preset and overrides, sized to the tokenizer."""
    from aifab.models.zoo import model_config

    positions = int(model_config("causal-lm", cfg.model).model_dump()["max_position_embeddings"])
    fixed = {
        "vocab_size": len(tokenizer),
        "max_position_embeddings": max(positions, cfg.block_size),
        "pad_token_id": int(tokenizer.pad_token_id),
        "bos_token_id": int(tokenizer.bos_token_id),
        "eos_token_id": int(tokenizer.eos_token_id),
    }
    return model_config("causal-lm", {**cfg.model, **fixed})


def _setup(cfg: Config, model_cfg: Any, info: DistInfo, device: torch.device) -> TrainState:
    import torch

    from aifab.models.zoo import build_model
    from aifab.train import distributed, loop

    model = distributed.wrap_model(build_model("causal-lm", model_cfg), info, device)
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=cfg.optim.lr,
        weight_decay=cfg.optim.weight_decay,
        betas=cfg.optim.betas,
    )
    scheduler = loop.warmup_cosine(
        optimizer,
        warmup_steps=cfg.optim.warmup_steps,
        total_steps=cfg.max_steps,
        min_lr_ratio=cfg.optim.min_lr_ratio,
    )
    return TrainState(model, optimizer, scheduler, info=info)


def _train(
    cfg: Config,
    state: TrainState,
    data: LMBlocks,
    device: torch.device,
    run: Any,
    ckpt_dir: Path | None,
) -> dict[str, float]:
    """The loop: step until ``max_steps``, with periodic eval and checkpoints.

    Returns:
        The loop's seconds without eval and checkpoints (data, steps, logging and progress
        included, so the throughput reported is what a user gets) and the steps taken.
    """
    from aifab.train import loop
    from aifab.train.text_data import lm_loss

    train_blocks, accum = data.blocks["train"], cfg.optim.grad_accum
    start, begin, aside = state.step, time.perf_counter(), 0.0
    show = cfg.progress and state.is_main
    with loop.Progress(
        cfg.max_steps, start_step=state.step, enabled=show, every_s=cfg.progress_every_s
    ) as bar:
        while state.step < cfg.max_steps:
            batches = _batches(cfg, train_blocks, state.step)
            loss = optimizer_step(
                state, batches, device, bf16=cfg.bf16, clip_norm=cfg.optim.clip_norm
            )
            step = state.step
            bar.update(step, loss, cfg.batch_size * accum)
            if step % cfg.log_every == 0 or step == cfg.max_steps:
                lr = state.scheduler.get_last_lr()[0]
                log_metrics(run, {"train_loss": loss, "lr": lr}, step)
            t0 = time.perf_counter()
            evaluate = step % cfg.eval_every == 0 and step < cfg.max_steps
            if evaluate and run is not None and "valid" in data.blocks:  # rank 0 only
                blocks = data.blocks["valid"][: cfg.eval_blocks]
                valid = lm_loss(state.module, blocks, device, cfg.batch_size, cfg.bf16)
                run.log_metrics({"valid_loss": valid}, step)
            if (
                ckpt_dir
                and cfg.checkpoint_every
                and (step % cfg.checkpoint_every == 0 or step == cfg.max_steps)
            ):
                state.save(ckpt_dir, keep=cfg.keep_checkpoints, micro_batches=step * accum)
            aside += time.perf_counter() - t0
    busy = time.perf_counter() - begin - aside
    return {"train_time_s": busy, "steps_timed": float(state.step - start)}


def _batches(cfg: Config, blocks: torch.Tensor, step: int) -> list[dict[str, torch.Tensor]]:
    """The micro-batches optimizer step ``step`` trains on (a pure function of the step)."""
    import torch

    from aifab.train.text_data import stream_batch

    accum, out = cfg.optim.grad_accum, []
    for index in range(step * accum, (step + 1) * accum):
        rows = stream_batch(len(blocks), index, cfg.batch_size, cfg.seed, drop_last=True)
        x = blocks[torch.from_numpy(rows)]
        out.append({"input_ids": x, "labels": x})
    return out


def _final_metrics(
    cfg: Config, state: TrainState, data: LMBlocks, device: torch.device, timing: dict[str, float]
) -> dict[str, float]:
    """Validation/test loss and perplexity, the unigram baseline, size and throughput."""
    from aifab.train.text_data import lm_loss

    metrics: dict[str, float] = {"steps": float(state.step)}
    for split in ("valid", "test"):
        if split in data.blocks:
            loss = lm_loss(state.module, data.blocks[split], device, cfg.batch_size, cfg.bf16)
            metrics[f"{split}_loss"] = loss
            metrics[f"{split}_perplexity"] = math.exp(min(loss, 50.0))
    metrics["unigram_entropy"] = data.unigram_entropy
    metrics["num_parameters"] = float(sum(p.numel() for p in state.module.parameters()))
    if timing["steps_timed"]:
        per_step = timing["train_time_s"] / timing["steps_timed"]
        tokens = cfg.batch_size * cfg.optim.grad_accum * cfg.block_size
        metrics["step_time_s"] = per_step
        metrics["tokens_per_s"] = tokens / per_step
    return metrics


def _save(
    cfg: Config,
    state: TrainState,
    tokenizer: Any,
    model_cfg: Any,
    version: VersionInfo,
    metrics: dict[str, float],
) -> Path:
    """Write the model directory: HF weights, tokenizer and the aifab sidecar with lineage."""
    from aifab.models.checkpoint import save_model

    out = output_dir(cfg.output_dir, "lm", state.run_id)
    meta = lineage_meta("lm", state.run_id, version, metrics)
    meta.update(text_column=cfg.text_column, block_size=cfg.block_size)
    model = state.module.to("cpu")
    return save_model(
        out, model, builder="causal-lm", config=model_cfg, meta=meta, tokenizer=tokenizer
    )


if __name__ == "__main__":
    from aifab.train.submit import load_recipe_config

    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m aifab.train.recipes.lm CONFIG [key=value ...]")
    try:
        config = load_recipe_config("lm", sys.argv[1], sys.argv[2:])
        print(json.dumps(main(config.model_dump(mode="json", by_alias=True)), default=str))
    except InvalidInputError as exc:
        raise SystemExit(f"error: {exc.message}") from None
