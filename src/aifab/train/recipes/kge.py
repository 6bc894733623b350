"""The ``kge`` recipe: knowledge-graph embeddings (zoo ``rotate`` or ``transe``) on triples.

The dataset has head, relation, tail (and split) columns; training uses negative sampling and
Adam; evaluation is filtered MRR and Hits@1/3/10 on the test split. RotatE uses the
self-adversarial negative-sampling loss of its paper, TransE the margin ranking loss.

Read top to bottom: validate -> data -> model -> resume -> the loop -> evaluate -> save, log,
register. ``python -m aifab.train.recipes.kge config.yaml [key=value ...]`` runs it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from aifab.core.config import StrictConfig, as_config
from aifab.core.errors import InvalidInputError
from aifab.train.lifecycle import (
    TrainState,
    attach_run,
    check_batch,
    ending,
    lineage_meta,
    log_metrics,
    output_dir,
    publish,
    resolve_dataset,
    run_distributed,
    summary,
)
from aifab.train.recipe_config import RecipeConfig

if TYPE_CHECKING:
    import torch

    from aifab.data.catalog import VersionInfo
    from aifab.train.distributed import DistInfo

VOCAB_FILE = "vocab.json"


class KGEModelChoice(StrictConfig):
    """Which zoo embedding model, with config overrides (dim, gamma, margin, ...)."""

    name: Literal["rotate", "transe"] = Field("rotate", description="rotate or transe.")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Zoo config overrides; entity and relation counts come from the data.",
    )


class Config(RecipeConfig):
    """Everything the kge recipe reads (shipped YAML files are instances of it).

    The keys every recipe shares (checkpoints, seed, device, run, output) are RecipeConfig's.
    """

    dataset: str = Field(..., description="Dataset ref of triples (NAME or NAME@VERSION).")
    head_column: str = Field("head", description="Head entity column.")
    relation_column: str = Field("relation", description="Relation column.")
    tail_column: str = Field("tail", description="Tail entity column.")
    split_column: str = Field("split", description="train/valid/test column (else 80/10/10).")
    model: KGEModelChoice = Field(default_factory=KGEModelChoice)
    epochs: int = Field(100, ge=1, description="Passes over the training triples.")
    batch_size: int = Field(256, ge=1, description="Positive triples per step (over replicas).")
    negatives: int = Field(16, ge=1, description="Corrupted triples per positive.")
    lr: float = Field(0.02, gt=0, description="Adam learning rate (cosine-decayed to 10%).")
    eval_every: int | None = Field(
        None, ge=1, description="Epochs between validation MRR evaluations (default: 10 evals)."
    )
    checkpoint_every: int | None = Field(None, ge=1, description="Epochs between checkpoints.")
    experiment: str = Field("kge", description="MLflow experiment.")

    def check_inputs(self) -> None:
        """Check the dataset and its triple columns before a job starts."""
        version = resolve_dataset(self.dataset)
        for key in ("head_column", "relation_column", "tail_column"):
            column = getattr(self, key)
            if column not in version.columns:
                raise InvalidInputError(
                    f"{key}: dataset {version.ref} has no column {column!r} "
                    f"(columns: {', '.join(version.columns)})"
                )


@dataclass(frozen=True)
class Triples:
    """Triple ids per split, every known true triple (for filtering), and the vocabularies."""

    splits: dict[str, torch.Tensor]
    all_true: torch.Tensor
    entities: list[str]
    relations: list[str]


def load_triples(cfg: Config, version: VersionInfo) -> Triples:
    """Read the triples, map labels to ids (over all splits) and split them.

    Raises:
        InvalidInputError: a NULL head/relation/tail (row named), a bad split value, or no
            training or test triples.
    """
    import numpy as np
    import torch

    from aifab.train import datasets

    columns = [cfg.head_column, cfg.relation_column, cfg.tail_column]
    has_split = cfg.split_column in version.columns
    table = datasets.read_table(version, columns + ([cfg.split_column] if has_split else []))
    for name in columns:
        col = table.column(name)
        if col.null_count:
            row = int(np.flatnonzero(np.asarray(col.is_null()))[0])
            raise InvalidInputError(f"dataset {version.ref}: column {name!r} is NULL in row {row}")
    ids, entities, relations = datasets.triples(table, *columns)
    splits = table.column(cfg.split_column).to_pylist() if has_split else None
    index = datasets.split_indices(splits, len(ids), seed=cfg.seed)
    if len(index["test"]) == 0:
        raise InvalidInputError(f"dataset {version.ref}: no 'test' triples to evaluate on")
    all_ids = torch.from_numpy(ids)
    by_split = {name: all_ids[torch.from_numpy(rows)] for name, rows in index.items() if len(rows)}
    return Triples(by_split, all_ids, entities, relations)


def main(config: Mapping[str, Any] | Config | str | Path) -> dict[str, Any]:
    """Train KG embeddings; return ``run_id``, ``metrics``, ``model_dir``, ``model_version``...

    With several replicas each trains on its shard of every global batch (and of its
    negatives); rank 0 alone evaluates, logs, checkpoints and saves.
    """
    cfg = as_config(Config, config, source="kge config")
    return run_distributed(cfg.device, lambda info, device: _run(cfg, info, device))


def _run(cfg: Config, info: DistInfo, device: torch.device) -> dict[str, Any]:
    from aifab.models.zoo import model_config
    from aifab.train import checkpointing, distributed, loop
    from aifab.train.datasets import dataset_input

    loop.set_deterministic(cfg.deterministic, cfg.threads)
    loop.seed_everything(cfg.seed)
    check_batch(cfg.batch_size, info)
    cfg.check_inputs()
    version = resolve_dataset(cfg.dataset)
    data = load_triples(cfg, version)
    counts = {"num_entities": len(data.entities), "num_relations": len(data.relations)}
    model_cfg = model_config(cfg.model.name, {**cfg.model.config, **counts})
    state = _setup(cfg, model_cfg, info, device, len(data.splits["train"]))
    state.resume(checkpointing.checkpoint_dir(cfg.checkpoint_dir))
    run = attach_run(state, "kge", cfg, lambda: [dataset_input(version)])
    with ending(run):
        seconds = _train(cfg, state, data, device, run)
        metrics: dict[str, float] = {}
        if state.is_main:
            metrics.update(evaluate(state.module, data, "valid"))
            metrics.update(evaluate(state.module, data, "test"))
            metrics.update(epochs=float(state.step), train_time_s=seconds, **counts)
        out = summary(state, cfg, distributed.broadcast_object(metrics, info), epochs=state.step)
        if run is not None:
            run.log_metrics(metrics, state.step)
            model_dir = _save(cfg, state, model_cfg, data, version, metrics)
            out["model_dir"] = str(model_dir)
            out["model_version"] = publish(
                run, model_dir, recipe="kge", cfg=cfg, dataset_ref=version.ref
            )
        return out


def _setup(
    cfg: Config, model_cfg: Any, info: DistInfo, device: torch.device, n_train: int
) -> TrainState:
    """Model, Adam and a cosine schedule stepped per batch; ``TrainState.step`` counts epochs."""
    import torch

    from aifab.models.zoo import build_model
    from aifab.train import distributed, loop

    model = distributed.wrap_model(build_model(cfg.model.name, model_cfg), info, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    per_epoch = -(-n_train // cfg.batch_size)
    scheduler = loop.warmup_cosine(
        optimizer, warmup_steps=0, total_steps=cfg.epochs * per_epoch, min_lr_ratio=0.1
    )
    return TrainState(model, optimizer, scheduler, info=info)


def _train(cfg: Config, state: TrainState, data: Triples, device: torch.device, run: Any) -> float:
    """Epochs of negative-sampling steps, with validation MRR and checkpoints between epochs.

    Returns:
        Seconds spent in training epochs (evaluation and checkpoints excluded).
    """
    from aifab.train import checkpointing, loop

    ckpt_dir = checkpointing.checkpoint_dir(cfg.checkpoint_dir)
    eval_every = cfg.eval_every or max(1, cfg.epochs // 10)
    train, busy = data.splits["train"], 0.0
    show = cfg.progress and state.is_main
    with loop.Progress(
        cfg.epochs, start_step=state.step, enabled=show, every_s=cfg.progress_every_s
    ) as bar:
        while state.step < cfg.epochs:
            t0 = time.perf_counter()
            loss = _epoch(cfg, state, train, len(data.entities), device)
            busy += time.perf_counter() - t0
            state.step += 1
            epoch = state.step
            bar.update(epoch, loss, len(train))
            log_metrics(run, {"train_loss": loss, "lr": state.scheduler.get_last_lr()[0]}, epoch)
            evaluating = epoch % eval_every == 0 and epoch < cfg.epochs
            if evaluating and "valid" in data.splits and run is not None:  # rank 0 only
                run.log_metrics(evaluate(state.module, data, "valid"), epoch)
            if (
                ckpt_dir
                and cfg.checkpoint_every
                and (epoch % cfg.checkpoint_every == 0 or epoch == cfg.epochs)
            ):
                state.save(ckpt_dir, keep=cfg.keep_checkpoints, micro_batches=0)
    return busy


def _epoch(
    cfg: Config, state: TrainState, train: torch.Tensor, num_entities: int, device: torch.device
) -> float:
    """One pass over the training triples; returns the mean loss (over all replicas).

    Batch order and negatives are drawn from generators seeded by (seed, epoch), so an epoch
    is the same whether or not the run was resumed before it. Every replica draws the whole
    global batch and its negatives, then trains on its rows of them.
    """
    import numpy as np
    import torch

    from aifab.models.kge import corrupt_triples
    from aifab.train import distributed
    from aifab.train.datasets import epoch_batches

    epoch, info = state.step, state.info
    world = info.world_size if info is not None else 1
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + epoch)
    model: Any = state.module
    state.model.train()
    total = torch.zeros(1, dtype=torch.float64)
    batches = epoch_batches(len(train), cfg.batch_size, seed=cfg.seed, epoch=epoch)
    for rows in batches:
        positive = train[torch.from_numpy(rows)]
        negative = corrupt_triples(positive, num_entities, cfg.negatives, generator=gen)
        if info is not None and world > 1:
            mine = torch.from_numpy(distributed.shard(np.arange(len(rows)), info))
            positive, negative = positive[mine], negative[mine]
        # One forward through the (DDP) model scores positives and negatives together.
        scores = state.model(torch.cat([positive[:, None], negative], dim=1).to(device))
        loss = model.loss(scores[:, 0], scores[:, 1:])
        # The loss is a mean over positives: weight this rank's by its share of the batch.
        share = len(positive) / len(rows)
        state.optimizer.zero_grad(set_to_none=True)
        (loss * (share * world)).backward()
        state.optimizer.step()
        state.scheduler.step()
        total += float(loss.detach()) * share
    if info is not None:
        distributed.all_reduce_sum(total, info)  # the replicas' shares add up to the batch
    return float(total) / len(batches)


def evaluate(model: torch.nn.Module, data: Triples, split: str) -> dict[str, float]:
    """Filtered MRR and Hits@1/3/10 (head and tail prediction) on ``split`` ({} if empty)."""
    from aifab.train.kge_eval import evaluate_link_prediction

    if split not in data.splits:
        return {}
    scorer: Any = model
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    test, everything = data.splits[split].to(device), data.all_true.to(device)
    metrics = evaluate_link_prediction(
        scorer.score, test, everything, len(data.entities), prefix=f"{split}_"
    )
    model.train(was_training)
    return metrics


def _save(
    cfg: Config,
    state: TrainState,
    model_cfg: Any,
    data: Triples,
    version: VersionInfo,
    metrics: dict[str, float],
) -> Path:
    """Write the model directory (weights + sidecar) and ``vocab.json`` (id -> label)."""
    from aifab.core.atomic import atomic_write_text
    from aifab.models.checkpoint import save_model

    out = output_dir(cfg.output_dir, "kge", state.run_id)
    meta = lineage_meta("kge", state.run_id, version, metrics)
    meta["vocab"] = VOCAB_FILE
    model = state.module.to("cpu")
    save_model(out, model, builder=cfg.model.name, config=model_cfg, meta=meta)
    vocab = {"entities": data.entities, "relations": data.relations}
    atomic_write_text(out / VOCAB_FILE, json.dumps(vocab, indent=1) + "\n")
    return out


if __name__ == "__main__":
    from aifab.train.submit import load_recipe_config

    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m aifab.train.recipes.kge CONFIG [key=value ...]")
    try:
        config = load_recipe_config("kge", sys.argv[1], sys.argv[2:])
        print(json.dumps(main(config.model_dump(mode="json", by_alias=True)), default=str))
    except InvalidInputError as exc:
        raise SystemExit(f"error: {exc.message}") from None
