"""The ``classify`` recipe: a zoo classifier trained on a dataset version's label column.

Models: mlp (tabular), cnn (images), transformer-classifier (text), fusion-classifier (any
mix of image, text and fields); exact resume from
checkpoints, data parallelism (DDP/FSDP/DeepSpeed) and MLflow tracking. Read top to bottom:
validate -> data -> model -> resume -> the loop -> evaluate -> save, log, register.
``python -m aifab.train.recipes.classify config.yaml [key=value ...]`` runs it.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aifab.core.config import as_config
from aifab.core.errors import InvalidInputError
from aifab.train.classify_config import ClassifyConfig, EarlyStopConfig, ModelChoice
from aifab.train.lifecycle import open_run
from aifab.train.trial import ENV_STORAGE

__all__ = ["ClassifyConfig", "Config", "EarlyStopConfig", "ModelChoice", "main"]

if TYPE_CHECKING:
    import numpy as np
    import torch

    from aifab.train.classification import ClassifyData
    from aifab.train.distributed import DistInfo
    from aifab.train.loop import EarlyStopping


class Config(ClassifyConfig):
    """Everything the classify recipe reads (shipped YAML files are instances of it).

    The fields are :class:`ClassifyConfig`'s; this class adds the check a job runs first.
    """

    def check_inputs(self) -> None:
        """Check the dataset and columns before a job starts (see aifab.train.submit)."""
        from aifab.train.classification import check_inputs

        check_inputs(self)


def main(config: Mapping[str, Any] | Config | str | Path) -> dict[str, Any]:
    """Train a classifier; return ``run_id``, ``metrics``, ``model_dir``, ``model_version``..."""
    cfg = as_config(Config, config, source="classify config")
    from aifab.train import distributed, loop

    info = distributed.init_distributed(loop.pick_device(cfg.device).type)
    try:
        return _train(cfg, info, loop.pick_device(cfg.device, info.local_rank))
    finally:
        distributed.shutdown(info)


@dataclass
class _Parts:
    """What setup builds and the loop updates."""

    data: ClassifyData
    model: torch.nn.Module
    model_name: str
    model_cfg: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    stopper: EarlyStopping
    total_steps: int
    engine: Any = None
    #: The Optuna trial of a sweep (rank 0 only); ``sweep`` is True on every rank of one.
    reporter: Any = None
    sweep: bool = False
    bf16: bool = False


@dataclass
class _Position:
    """Where training stands; all of it is in each checkpoint."""

    step: int = 0
    epoch: int = 0
    batch: int = 0
    rng: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    best: dict[str, Any] | None = None
    resumed_from: int | None = None
    stopped: bool = False
    pruned: bool = False
    #: Wall time of this process's steps, without evaluations and checkpoints (benchmarks).
    train_time_s: float = 0.0
    steps_timed: int = 0


def _train(cfg: Config, info: DistInfo, device: torch.device) -> dict[str, Any]:
    from aifab.train import distributed

    parts, pos = _setup(cfg, info, device)
    pos = _resume(cfg, info, parts, pos)
    datasets = parts.data.dataset_inputs
    run = open_run("classify", cfg, datasets, pos.run_id) if info.is_main else None
    # Every rank records the run id in checkpoints; only rank 0 holds the run.
    pos.run_id = distributed.broadcast_object(run.id if run else None, info)
    if run is not None and parts.reporter is not None:
        parts.reporter.attach_run(run.id)
    status = "FAILED"
    try:
        _loop(cfg, info, device, parts, pos, run)
        summary = _finish(cfg, info, device, parts, pos, run)
        status = "FINISHED"
        return summary
    finally:
        if run is not None:
            run.end(status)


def _setup(cfg: Config, info: DistInfo, device: torch.device) -> tuple[_Parts, _Position]:
    """Determinism, data, model, optimizer, schedule, early stopping."""
    import torch

    from aifab.train import checkpointing, distributed, loop
    from aifab.train.classification import build_model, load_data

    loop.set_deterministic(cfg.deterministic, cfg.threads)
    loop.seed_everything(cfg.seed)
    # Rank 0 prepares first (it may commit a features dataset); the others then find it.
    if not info.is_main:
        distributed.barrier(info)
    data = load_data(cfg)
    if info.is_main:
        distributed.barrier(info)
    module, name, model_cfg = build_model(cfg, data)
    # The loop starts from this RNG state, whatever the rest of setup consumes.
    pos = _Position(rng=checkpointing.rng_state())
    model = distributed.wrap_model(module, info, device, cfg.strategy)
    o = cfg.optim
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=o.lr, weight_decay=o.weight_decay, betas=o.betas
    )
    batches = math.ceil(len(data.index["train"]) / cfg.batch_size)
    total = min(cfg.max_steps or 1 << 62, cfg.epochs * math.ceil(batches / o.grad_accum))
    scheduler = loop.warmup_cosine(
        optimizer, warmup_steps=o.warmup_steps, total_steps=total, min_lr_ratio=o.min_lr_ratio
    )
    engine = None
    if cfg.strategy == "deepspeed" and info.enabled:
        engine, optimizer = distributed.deepspeed_initialize(model, optimizer, cfg.deepspeed or {})
    es = cfg.early_stopping
    stopper = loop.EarlyStopping(
        "min" if es and es.metric == "valid_loss" else "max",
        es.patience if es else 1 << 30,
        es.min_delta if es else 0.0,
    )
    parts = _Parts(data, model, name, model_cfg, optimizer, scheduler, stopper, total, engine)
    parts.sweep = bool(os.environ.get(ENV_STORAGE))
    parts.bf16 = cfg.bf16 if cfg.bf16 is not None else device.type == "cuda"
    if parts.sweep and info.is_main:
        from aifab.train.trial import trial_reporter

        parts.reporter = trial_reporter()
    return parts, pos


def _resume(cfg: Config, info: DistInfo, parts: _Parts, pos: _Position) -> _Position:
    """Continue from the newest checkpoint, if any (rank 0 picks it; every rank loads it)."""
    from aifab.train import checkpointing, distributed

    ckpt_dir = checkpointing.checkpoint_dir(cfg.checkpoint_dir)
    latest = distributed.broadcast_object(checkpointing.latest_checkpoint(ckpt_dir), info)
    if latest is None:
        return pos
    ck = checkpointing.load_checkpoint(latest, restore_rng=False)
    distributed.load_model_state(parts.model, ck["model"])
    distributed.load_optimizer_state(parts.model, parts.optimizer, ck["optimizer"])
    parts.scheduler.load_state_dict(ck["scheduler"])
    parts.stopper.load_state_dict(ck["extra"]["early_stopping"])
    return _Position(
        step=ck["step"],
        epoch=ck["position"]["epoch"],
        batch=ck["position"]["batch"],
        rng=ck["rng"],
        run_id=ck["extra"].get("run_id"),
        best=ck["extra"].get("best_model"),
        resumed_from=ck["step"],
        stopped=bool(ck["extra"].get("stopped", False)),
    )


def _loop(
    cfg: Config, info: DistInfo, device: torch.device, parts: _Parts, pos: _Position, run: Any
) -> None:
    """The training loop: micro-batches, accumulation, optimizer steps, log, eval, checkpoint."""
    import time

    import torch

    from aifab.train import checkpointing, loop

    accum, ckpt_dir = cfg.optim.grad_accum, checkpointing.checkpoint_dir(cfg.checkpoint_dir)
    start, begin, aside = pos.step, time.perf_counter(), 0.0
    window_loss = torch.zeros(2, dtype=torch.float64)  # (loss sum, examples) since last log
    checkpointing.set_rng_state(pos.rng)
    show = cfg.progress and info.is_main
    with loop.Progress(
        parts.total_steps, start_step=pos.step, enabled=show, every_s=cfg.progress_every_s
    ) as bar:
        while pos.step < parts.total_steps and not pos.stopped:
            batches = parts.data.epoch_batches(cfg.batch_size, seed=cfg.seed, epoch=pos.epoch)
            for b in range(pos.batch, len(batches)):
                update = loop.is_update_step(b, accum, len(batches))
                window = min(accum, len(batches) - (b - b % accum))
                window_loss += _micro_step(cfg, info, device, parts, batches[b], window, update)
                if not update:
                    continue
                grad_norm = _optimizer_step(cfg, parts)
                last = b + 1 == len(batches)
                pos.step += 1
                pos.epoch, pos.batch = (pos.epoch + 1, 0) if last else (pos.epoch, b + 1)
                if pos.step % cfg.log_every == 0 or pos.step == parts.total_steps:
                    loss = _log_train(info, parts, pos, run, window_loss, grad_norm)
                    window_loss = torch.zeros(2, dtype=torch.float64)
                    bar.update(pos.step, loss, cfg.batch_size * cfg.log_every)
                t0 = time.perf_counter()
                if (pos.step % cfg.eval_every == 0) if cfg.eval_every else last:
                    _evaluate(cfg, info, device, parts, pos, run)
                every = cfg.checkpoint_every
                done = pos.step >= parts.total_steps or pos.stopped
                if ckpt_dir is not None and every and (pos.step % every == 0 or done):
                    _save_checkpoint(cfg, ckpt_dir, info, parts, pos)
                aside += time.perf_counter() - t0
                pos.train_time_s = time.perf_counter() - begin - aside
                pos.steps_timed = pos.step - start
                if done:
                    return


def _micro_step(
    cfg: Config,
    info: DistInfo,
    device: torch.device,
    parts: _Parts,
    global_batch: np.ndarray,
    window: int,
    update: bool,
) -> torch.Tensor:
    """Forward and backward this rank's shard; return ``(loss sum, examples)``."""
    import torch

    from aifab.train import distributed, loop

    parts.model.train()
    rows = distributed.shard(global_batch, info)
    with distributed.maybe_no_sync(parts.model, update), loop.autocast(device, parts.bf16):
        logits = parts.data.forward(parts.model, rows, device)
        loss_sum = torch.nn.functional.cross_entropy(
            logits.float(), parts.data.targets(rows, device), reduction="sum"
        )
        # Replicas average gradients, so scale each shard's sum to give the global mean.
        loss = loss_sum * (info.world_size / (len(global_batch) * window))
        if parts.engine is not None:
            parts.engine.backward(loss)
        else:
            loss.backward()
    return torch.tensor([float(loss_sum.detach()), len(rows)], dtype=torch.float64)


def _optimizer_step(cfg: Config, parts: _Parts) -> float:
    """Clip, step, schedule, zero; return the gradient norm before clipping."""
    from aifab.train import loop

    if parts.engine is not None:  # DeepSpeed clips and steps itself
        parts.engine.step()
        grad_norm = float("nan")
    else:
        grad_norm = loop.clip_gradients(parts.model.parameters(), cfg.optim.clip_norm)
        parts.optimizer.step()
        parts.optimizer.zero_grad(set_to_none=True)
    parts.scheduler.step()
    return grad_norm


def _log_train(
    info: DistInfo, parts: _Parts, pos: _Position, run: Any, window: torch.Tensor, norm: float
) -> float:
    """Log the mean train loss over all replicas since the last log; return it."""
    from aifab.train import distributed

    total = distributed.all_reduce_sum(window, info)
    loss = float(total[0] / max(1.0, float(total[1])))
    if run is not None:
        lr = float(parts.scheduler.get_last_lr()[0])
        run.log_metrics({"train_loss": loss, "lr": lr, "grad_norm": norm}, pos.step)
    return loss


def _evaluate(
    cfg: Config, info: DistInfo, device: torch.device, parts: _Parts, pos: _Position, run: Any
) -> None:
    """Validation metrics; early stopping, the best weights and sweep pruning follow them."""
    from aifab.train import distributed

    metrics = parts.data.evaluate(parts.model, "valid", device)  # every replica: same numbers
    if run is not None and metrics:
        run.log_metrics({**metrics, "epoch": pos.epoch}, pos.step)
    if parts.sweep and metrics:
        prune = parts.reporter.report_metrics(metrics, pos.step) if parts.reporter else False
        pos.pruned = bool(distributed.broadcast_object(prune, info))
        pos.stopped = pos.stopped or pos.pruned
    es = cfg.early_stopping
    if not metrics or es is None:
        return
    if parts.stopper.update(metrics[es.metric], pos.step) and es.restore_best:
        pos.best = distributed.model_state(parts.model)
    pos.stopped = pos.stopped or parts.stopper.should_stop


def _save_checkpoint(
    cfg: Config, directory: Path, info: DistInfo, parts: _Parts, pos: _Position
) -> None:
    """Gather the full state (a collective under FSDP) and let rank 0 write it."""
    from aifab.train import checkpointing, distributed

    model_sd = distributed.model_state(parts.model)
    optim_sd = distributed.optimizer_state(parts.model, parts.optimizer)
    if info.is_main:
        checkpointing.save_checkpoint(
            directory,
            step=pos.step,
            model=model_sd,
            optimizer=optim_sd,
            scheduler=parts.scheduler.state_dict(),
            position={"epoch": pos.epoch, "batch": pos.batch},
            extra={
                "run_id": pos.run_id,
                "best_model": pos.best,
                "early_stopping": parts.stopper.state_dict(),
                "stopped": pos.stopped,
            },
            keep=cfg.keep_checkpoints,
        )
    distributed.barrier(info)


def _finish(
    cfg: Config, info: DistInfo, device: torch.device, parts: _Parts, pos: _Position, run: Any
) -> dict[str, Any]:
    """Final metrics on the (best) weights; rank 0 saves, logs and registers."""
    from aifab.train import distributed

    if pos.best is not None:
        distributed.load_model_state(parts.model, pos.best)
    data = parts.data
    metrics = {
        **data.evaluate(parts.model, "valid", device),
        **data.evaluate(parts.model, "test", device),
        "steps": float(pos.step),
    }
    if cfg.early_stopping is not None:
        metrics["best_step"] = float(parts.stopper.best_step)
    if pos.steps_timed:
        metrics["step_time_s"] = pos.train_time_s / pos.steps_timed
    summary: dict[str, Any] = {
        "run_id": pos.run_id,
        "metrics": metrics,
        "steps": pos.step,
        "stopped_early": pos.stopped and not pos.pruned,
        "pruned": pos.pruned,
        "resumed_from": pos.resumed_from,
        "classes": data.classes,
        "model": parts.model_name,
        "model_dir": None,
        "model_version": None,
    }
    state = distributed.model_state(parts.model)  # a collective under FSDP: every rank calls it
    if run is not None:
        from aifab.train.classification import finish_run

        model = (parts.model_name, parts.model_cfg)
        summary.update(finish_run(cfg, run, data, state, model, metrics))
        if pos.pruned:
            run.set_tags({"aifab.pruned": "true"})
        if parts.reporter is not None:
            parts.reporter.finish(metrics)
    return summary


if __name__ == "__main__":
    # Run through the importable module: its Config is the class load_recipe_config returns.
    from aifab.train.recipes import classify
    from aifab.train.submit import load_recipe_config

    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m aifab.train.recipes.classify CONFIG [key=value ...]")
    try:
        config = load_recipe_config("classify", sys.argv[1], sys.argv[2:])
        summary = classify.main(config.model_dump(by_alias=True))
        print(json.dumps(summary, default=str))
    except InvalidInputError as exc:
        raise SystemExit(f"error: {exc.message}") from None
