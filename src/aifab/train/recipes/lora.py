"""The ``lora`` recipe: supervised fine-tuning of a causal LM with PEFT LoRA adapters.

Instruction/chat rows are formatted with the tokenizer's chat template, with the loss on the
assistant's replies only. Saves the adapter (PEFT format + sidecar), optionally the merged model.

Read top to bottom: validate -> base model -> data -> adapters -> resume -> the loop -> evaluate
-> save, log, register. ``python -m aifab.train.recipes.lora config.yaml [key=value ...]``.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from aifab.core.config import StrictConfig, as_config
from aifab.core.errors import InvalidInputError, first_line
from aifab.train.adapter_card import base_reference, point_at_base, render_card
from aifab.train.lifecycle import (
    TrainState,
    attach_run,
    check_batch,
    ending,
    lineage_meta,
    log_metrics,
    main_first,
    model_directory,
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
    from aifab.train.text_data import ChatExample

ADAPTER_SIDECAR = "aifab-adapter.json"


class LoraSettings(StrictConfig):
    """The low-rank adapters: which projections get them, their rank, scale and dropout."""

    r: int = Field(8, ge=1, description="Adapter rank.")
    alpha: int = Field(16, gt=0, description="Scale numerator: updates are scaled alpha/r.")
    dropout: float = Field(0.05, ge=0, lt=1, description="Dropout on the adapter input.")
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        min_length=1,
        description="Module names to adapt (Llama attention projections by default).",
    )


def _default_optim() -> OptimConfig:
    return OptimConfig(lr=2e-3, weight_decay=0.0, warmup_steps=5)


class Config(RecipeConfig):
    """Everything the lora recipe reads (shipped YAML files are instances of it).

    The keys every recipe shares (checkpoints, seed, device, run, output) are RecipeConfig's.
    """

    dataset: str = Field(
        ...,
        description="Dataset ref with 'messages', or 'instruction' (+ 'input') and 'output', "
        "or 'prompt' and 'response' columns.",
    )
    base: str = Field(
        ...,
        description="Base model: a model directory, a registered NAME[@VERSION], or hf:org/name.",
    )
    split_column: str = Field("split", description="train/valid/test column (else 80/10/10).")
    lora: LoraSettings = Field(default_factory=LoraSettings)
    max_length: int = Field(256, ge=8, description="Tokens per example (longer ones truncated).")
    batch_size: int = Field(8, ge=1, description="Examples per micro-batch (over replicas).")
    epochs: int = Field(3, ge=1, description="Passes over the training examples.")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many steps.")
    optim: OptimConfig = Field(default_factory=_default_optim)
    eval_every: int | None = Field(None, ge=1, description="Steps between evals (default: epoch).")
    group_by_length: bool = Field(
        False,
        description="Batch examples of similar length together (less padding when short and "
        "long examples mix).",
    )
    merge: bool = Field(False, description="Also save the base with the adapters merged in.")
    bf16: bool = Field(False, description="bf16 autocast (CPU and Ampere+ GPUs).")
    experiment: str = Field("lora", description="MLflow experiment.")
    log_every: int = Field(10, ge=1, description="Steps between train-loss points.")
    output_dir: str | None = Field(None, description="Adapter directory (default: artifacts).")
    register_as: str | None = Field(
        None,
        alias="register",
        description="Register under this name: the merged model with merge, else the adapter.",
    )
    intended_use: str = Field("", description="The adapter card's intended use.")
    limitations: str = Field(
        "", description="Known limitations for the adapter card (training facts are added)."
    )

    def check_inputs(self) -> None:
        """Check the dataset's columns and that ``base`` is a causal LM with a tokenizer.

        Runs before a job starts, and again before any training.
        """
        from aifab.models.checkpoint import read_sidecar
        from aifab.train.text_data import chat_columns

        chat_columns(resolve_dataset(self.dataset).columns)
        directory = model_directory(self.base)
        if (directory / "aifab-model.json").is_file():
            builder = read_sidecar(directory)["builder"]
            if builder != "causal-lm":
                raise InvalidInputError(f"base: {directory} is a {builder!r} model, not causal-lm")
        elif not (directory / "config.json").is_file():
            raise InvalidInputError(
                f"base: {directory} is not a model directory (no aifab-model.json or config.json)"
            )
        if not (directory / "tokenizer.json").is_file():
            raise InvalidInputError(f"base: {directory} has no tokenizer (tokenizer.json)")


def main(config: Mapping[str, Any] | Config | str | Path) -> dict[str, Any]:
    """Fine-tune with LoRA; return ``run_id``, ``metrics``, ``model_dir``, ``model_version``...

    With several replicas each trains on its shard of every global batch (DDP over the
    adapters); rank 0 alone logs, checkpoints and saves.
    """
    cfg = as_config(Config, config, source="lora config")
    return run_distributed(cfg.device, lambda info, device: _run(cfg, info, device))


def _run(cfg: Config, info: DistInfo, device: torch.device) -> dict[str, Any]:
    from aifab.models.tokenizer import load_tokenizer
    from aifab.train import checkpointing, distributed, loop
    from aifab.train.datasets import dataset_input

    loop.set_deterministic(cfg.deterministic, cfg.threads)
    loop.seed_everything(cfg.seed)
    check_batch(cfg.batch_size, info)
    # Rank 0 first: a registered base is downloaded once, then found in the cache.
    main_first(info, cfg.check_inputs)
    version = resolve_dataset(cfg.dataset)
    base_dir = model_directory(cfg.base)
    base_ref = base_reference(cfg.base, base_dir)  # what the adapter will name as its base
    tokenizer = load_tokenizer(base_dir)
    data = _encode(cfg, version, tokenizer)
    state, counts = _setup(cfg, base_dir, info, device, len(data["train"]))
    ckpt_dir = checkpointing.checkpoint_dir(cfg.checkpoint_dir)
    state.resume(ckpt_dir)
    run = attach_run(state, "lora", cfg, lambda: [dataset_input(version)])
    with ending(run):
        pad = int(tokenizer.pad_token_id or 0)
        initial = _losses(cfg, state, data, pad, device, "initial_") if state.step == 0 else {}
        metrics = {**counts, **initial}
        metrics.update(_train(cfg, state, data, pad, device, run, ckpt_dir))
        metrics.update(_losses(cfg, state, data, pad, device))
        metrics = distributed.broadcast_object(metrics, info)
        out = summary(state, cfg, metrics, steps=state.step, merged_dir=None)
        if run is not None:
            run.log_metrics(metrics, state.step)
            base = (base_ref, base_dir)
            out.update(_save(cfg, state, run, tokenizer, base, version, metrics))
        return out


def _losses(
    cfg: Config,
    state: TrainState,
    data: dict[str, list[ChatExample]],
    pad: int,
    device: torch.device,
    prefix: str = "",
) -> dict[str, float]:
    """Valid and test loss per assistant token, on rank 0 ({} elsewhere: it logs them)."""
    from aifab.train.text_data import chat_loss

    if not state.is_main:
        return {}
    size, bf16 = cfg.batch_size, cfg.bf16
    return {
        f"{prefix}{split}_loss": chat_loss(state.module, data[split], pad, device, size, bf16)
        for split in ("valid", "test")
        if split in data
    }


def _encode(cfg: Config, version: VersionInfo, tokenizer: Any) -> dict[str, list[ChatExample]]:
    """Chat-template every conversation; splits left empty are dropped.

    Raises:
        InvalidInputError: no training example keeps an assistant token after truncation.
    """
    from aifab.models.tokenizer import CHAT_TEMPLATE
    from aifab.train.text_data import chat_splits, encode_chats

    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = CHAT_TEMPLATE  # a plain HF base may ship without one
    out = {}
    for split, conversations in chat_splits(version, cfg.split_column, cfg.seed).items():
        examples, _ = encode_chats(tokenizer, conversations, cfg.max_length)
        if examples:
            out[split] = examples
    if "train" not in out:
        raise InvalidInputError(
            f"max_length: no training example has an assistant reply within {cfg.max_length} tokens"
        )
    return out


def _setup(
    cfg: Config, base_dir: Path, info: DistInfo, device: torch.device, n_train: int
) -> tuple[TrainState, dict[str, float]]:
    """Load the base, wrap it with LoRA adapters, and build the optimizer over the adapters."""
    import torch
    from peft import (
        LoraConfig,
        get_peft_model,
        get_peft_model_state_dict,
        set_peft_model_state_dict,
    )

    from aifab.models.checkpoint import load_model
    from aifab.train import distributed, loop

    base, _ = load_model(base_dir)
    peft_cfg = LoraConfig(
        task_type="CAUSAL_LM",
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=list(cfg.lora.target_modules),
        # A copy head (models.copy_lm) is small and decides where to copy from: it trains in
        # full beside the adapters, and merging writes the trained copy back into the base.
        modules_to_save=list(getattr(base, "copy_modules", ())) or None,
    )
    try:
        peft_model = get_peft_model(base, peft_cfg)
    except ValueError as exc:  # e.g. a target module the base does not have
        raise InvalidInputError(f"lora.target_modules: {first_line(exc)}") from None
    model = distributed.wrap_model(peft_model, info, device)  # DDP syncs the adapters only
    trainable = [p for p in model.parameters() if p.requires_grad]
    n_trainable = sum(p.numel() for p in trainable)
    n_total = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(
        trainable, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay, betas=cfg.optim.betas
    )
    scheduler = loop.warmup_cosine(
        optimizer,
        warmup_steps=cfg.optim.warmup_steps,
        total_steps=total_steps(cfg, n_train),
        min_lr_ratio=cfg.optim.min_lr_ratio,
    )
    counts = {
        "trainable_parameters": float(n_trainable),
        "total_parameters": float(n_total),
        "trainable_share": n_trainable / n_total,
    }
    adapters = (get_peft_model_state_dict, set_peft_model_state_dict)
    return TrainState(model, optimizer, scheduler, *adapters, info=info), counts


def total_steps(cfg: Config, n_train: int) -> int:
    """Optimizer steps of the run: ``epochs`` passes, capped by ``max_steps``."""
    per_epoch = max(1, -(-n_train // (cfg.batch_size * cfg.optim.grad_accum)))
    return min(cfg.max_steps or 1 << 62, cfg.epochs * per_epoch)


def _train(
    cfg: Config,
    state: TrainState,
    data: dict[str, list[ChatExample]],
    pad: int,
    device: torch.device,
    run: Any,
    ckpt_dir: Path | None,
) -> dict[str, float]:
    """The loop.

    Returns:
        The last train loss and the samples/s of the loop without eval and checkpoints (data,
        steps, logging and progress included).
    """
    from aifab.train import loop
    from aifab.train.text_data import chat_loss, collate, stream_batch

    train, total = data["train"], total_steps(cfg, len(data["train"]))
    lengths = tuple(len(e.input_ids) for e in train) if cfg.group_by_length else None
    accum = cfg.optim.grad_accum
    every = cfg.eval_every or max(1, -(-len(train) // (cfg.batch_size * accum)))  # an epoch
    begin, aside, samples, loss = time.perf_counter(), 0.0, 0, float("nan")
    show = cfg.progress and state.is_main
    with loop.Progress(
        total, start_step=state.step, enabled=show, every_s=cfg.progress_every_s
    ) as bar:
        while state.step < total:
            first = state.step * accum
            rows = [
                stream_batch(len(train), i, cfg.batch_size, cfg.seed, lengths=lengths)
                for i in range(first, first + accum)
            ]
            batches = [collate([train[i] for i in r], pad) for r in rows]
            loss = optimizer_step(
                state, batches, device, bf16=cfg.bf16, clip_norm=cfg.optim.clip_norm
            )
            samples += sum(len(r) for r in rows)
            bar.update(state.step, loss, sum(len(r) for r in rows))
            step = state.step
            if step % cfg.log_every == 0 or step == total:
                lr = state.scheduler.get_last_lr()[0]
                log_metrics(run, {"train_loss": loss, "lr": lr}, step)
            t0 = time.perf_counter()
            if step % every == 0 and step < total and "valid" in data and run is not None:
                valid = chat_loss(
                    state.module, data["valid"], pad, device, cfg.batch_size, cfg.bf16
                )
                run.log_metrics({"valid_loss": valid}, step)
            if (
                ckpt_dir
                and cfg.checkpoint_every
                and (step % cfg.checkpoint_every == 0 or step == total)
            ):
                state.save(ckpt_dir, keep=cfg.keep_checkpoints, micro_batches=step * accum)
            aside += time.perf_counter() - t0
    busy = time.perf_counter() - begin - aside
    return {"train_loss": loss, "samples_per_s": samples / busy if busy > 0 else 0.0}


def _save(
    cfg: Config,
    state: TrainState,
    run: Any,
    tokenizer: Any,
    base: tuple[str, Path],
    version: VersionInfo,
    metrics: dict[str, float],
) -> dict[str, Any]:
    """Write, log and register the adapter (PEFT ``save_pretrained``), tokenizer and sidecar.

    ``adapter_config.json`` names the base by its reference (``base`` is the reference and the
    directory it was loaded from) and ``README.md`` is the adapter's card. With ``merge``,
    also ``<output_dir>-merged``: the base with the adapters folded in (the one registered
    then).

    Returns:
        ``model_dir`` (the adapter), ``merged_dir`` (or None) and ``model_version``.
    """
    from aifab.core.atomic import atomic_write_text

    base_ref, base_dir = base
    out = output_dir(cfg.output_dir, "lora", state.run_id)
    model: Any = state.module.to("cpu")  # a PeftModel
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    point_at_base(out, base_ref)
    meta = lineage_meta("lora", state.run_id, version, metrics)
    meta.update(base=cfg.base, base_ref=base_ref, base_dir=str(base_dir))
    meta.update(lora=cfg.lora.model_dump(mode="json"))
    atomic_write_text(out / ADAPTER_SIDECAR, json.dumps(meta, indent=2, sort_keys=True) + "\n")
    card = render_card(
        meta,
        name=cfg.register_as or out.name,
        max_length=cfg.max_length,
        intended_use=cfg.intended_use,
        limitations=cfg.limitations,
    )
    atomic_write_text(out / "README.md", card)  # PEFT wrote its blank template there
    merged = None
    if cfg.merge:
        merged = out.with_name(out.name + "-merged")
        _save_merged(model.merge_and_unload(), merged, tokenizer, base_dir, meta)
        run.log_artifacts(out, "adapter")
    path = "adapter" if merged is None else "model"
    version_no = publish(
        run, merged or out, recipe="lora", cfg=cfg, dataset_ref=version.ref, artifact_path=path
    )
    return {
        "model_dir": str(out),
        "merged_dir": str(merged) if merged is not None else None,
        "model_version": version_no,
    }


def _save_merged(
    merged: Any, directory: Path, tokenizer: Any, base_dir: Path, meta: dict[str, Any]
) -> None:
    """An aifab base is saved as an aifab model directory; a plain HF base stays plain HF."""
    from aifab.models.checkpoint import read_sidecar, save_model

    if (base_dir / "aifab-model.json").is_file():
        base_cfg = read_sidecar(base_dir)["config"]
        save_model(
            directory,
            merged,
            builder="causal-lm",
            config=base_cfg,
            meta={**meta, "merged": True},
            tokenizer=tokenizer,
        )
    else:
        merged.save_pretrained(str(directory))
        tokenizer.save_pretrained(str(directory))


if __name__ == "__main__":
    from aifab.train.submit import load_recipe_config

    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m aifab.train.recipes.lora CONFIG [key=value ...]")
    try:
        config = load_recipe_config("lora", sys.argv[1], sys.argv[2:])
        print(json.dumps(main(config.model_dump(mode="json", by_alias=True)), default=str))
    except InvalidInputError as exc:
        raise SystemExit(f"error: {exc.message}") from None
