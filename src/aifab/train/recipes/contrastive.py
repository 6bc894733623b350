"""The ``contrastive`` recipe: a CLIP-style dual encoder (zoo ``dual-encoder``) on captions.

Image-caption pairs train it with the symmetric in-batch contrastive loss. Images come from a
column of lake bytes or file paths, captions from a text column (a BPE tokenizer is trained on
the training captions). Evaluation is text-to-image recall@1/@10 over the split's images (each
caption's own image among all of them). Read top to bottom: validate -> data -> model ->
resume -> the loop -> evaluate -> save, log, register.
``python -m aifab.train.recipes.contrastive config.yaml [key=value ...]`` runs it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from aifab.core.config import as_config
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
    import numpy as np
    import torch

    from aifab.data.catalog import VersionInfo
    from aifab.train.distributed import DistInfo


class Config(RecipeConfig):
    """Everything the contrastive recipe reads (shipped YAML files are instances of it)."""

    dataset: str = Field(..., description="Dataset ref of image-caption pairs.")
    image_column: str = Field("image", description="Images: lake bytes or file paths.")
    text_column: str = Field("caption", description="Captions.")
    split_column: str = Field("split", description="train/valid/test column (else 80/10/10).")
    image_size: int = Field(32, gt=0, description="Images are resized to this square size.")
    channels: int = Field(3, description="3 (RGB) or 1 (grey).", ge=1, le=3)
    vocab_size: int = Field(1000, ge=300, description="BPE vocabulary (trained on train).")
    max_length: int = Field(32, gt=0, description="Tokens per caption.")
    model: dict[str, Any] = Field(
        default_factory=dict, description="dual-encoder config overrides (embed_dim, towers)."
    )
    epochs: int = Field(20, ge=1, description="Passes over the training pairs.")
    batch_size: int = Field(64, ge=2, description="Pairs per step: the in-batch negatives.")
    lr: float = Field(2e-3, gt=0, description="AdamW learning rate (cosine-decayed to 10%).")
    checkpoint_every: int | None = Field(None, ge=1, description="Epochs between checkpoints.")
    experiment: str = Field("contrastive", description="MLflow experiment.")

    def check_inputs(self) -> None:
        """Check the dataset and its columns before a job starts."""
        version = resolve_dataset(self.dataset)
        for key in ("image_column", "text_column"):
            column = getattr(self, key)
            if column not in version.columns:
                raise InvalidInputError(
                    f"{key}: dataset {version.ref} has no column {column!r} "
                    f"(columns: {', '.join(version.columns)})"
                )


@dataclass
class Pairs:
    """Every row's image pixels and caption tokens, the split, and the tokenizer."""

    images: np.ndarray
    tokens: dict[str, np.ndarray]
    index: dict[str, np.ndarray]
    tokenizer: Any

    def batch(self, rows: np.ndarray, device: torch.device) -> dict[str, torch.Tensor]:
        """Model inputs of ``rows`` on ``device``."""
        import torch

        return {
            "image": torch.from_numpy(self.images[rows]).to(device),
            "input_ids": torch.from_numpy(self.tokens["input_ids"][rows]).to(device),
            "attention_mask": torch.from_numpy(self.tokens["attention_mask"][rows]).to(device),
        }


def load_pairs(cfg: Config, version: VersionInfo) -> Pairs:
    """Decode the images, train the tokenizer on training captions, tokenize every caption."""
    from aifab.models.tokenizer import train_bpe_tokenizer
    from aifab.train import datasets

    cols = [cfg.image_column, cfg.text_column]
    has_split = cfg.split_column in version.columns
    table = datasets.read_table(version, cols + ([cfg.split_column] if has_split else []))
    splits = table.column(cfg.split_column).to_pylist() if has_split else None
    index = datasets.split_indices(splits, table.num_rows, seed=cfg.seed)
    if len(index["train"]) < 2:
        raise InvalidInputError(f"dataset {version.ref}: fewer than 2 training pairs")
    images = datasets.image_files(
        table.column(cfg.image_column).to_pylist(), cfg.image_size, cfg.channels
    )
    texts = [str(t or "") for t in table.column(cfg.text_column).to_pylist()]
    tok = train_bpe_tokenizer((texts[i] for i in index["train"]), cfg.vocab_size)
    return Pairs(images, datasets.tokenize(texts, tok, cfg.max_length), index, tok)


def main(config: Mapping[str, Any] | Config | str | Path) -> dict[str, Any]:
    """Train a dual encoder; return ``run_id``, ``metrics``, ``model_dir``, ``model_version``."""
    cfg = as_config(Config, config, source="contrastive config")
    return run_distributed(cfg.device, lambda info, device: _run(cfg, info, device))


def _run(cfg: Config, info: DistInfo, device: torch.device) -> dict[str, Any]:
    from aifab.models.zoo import model_config
    from aifab.train import checkpointing, distributed, loop
    from aifab.train.datasets import dataset_input
    from aifab.train.multimodal_data import merge_config

    loop.set_deterministic(cfg.deterministic, cfg.threads)
    loop.seed_everything(cfg.seed)
    check_batch(cfg.batch_size, info)
    cfg.check_inputs()
    version = resolve_dataset(cfg.dataset)
    data = load_pairs(cfg, version)
    sizes = {
        "image": {"in_channels": cfg.channels, "image_size": cfg.image_size},
        "text": {
            "vocab_size": len(data.tokenizer),
            "max_len": cfg.max_length,
            "pad_token_id": int(data.tokenizer.pad_token_id or 0),
        },
    }
    model_cfg = model_config("dual-encoder", merge_config(sizes, cfg.model))
    state = _setup(cfg, model_cfg, info, device, len(data.index["train"]))
    state.resume(checkpointing.checkpoint_dir(cfg.checkpoint_dir))
    run = attach_run(state, "contrastive", cfg, lambda: [dataset_input(version)])
    with ending(run):
        seconds = _train(cfg, state, data, device, run)
        metrics: dict[str, float] = {"epochs": float(state.step), "train_time_s": seconds}
        if state.is_main:
            metrics.update(recall_at(state.module, data, "valid", device))
            metrics.update(recall_at(state.module, data, "test", device))
        out = summary(state, cfg, distributed.broadcast_object(metrics, info), epochs=state.step)
        if run is not None:
            run.log_metrics(metrics, state.step)
            model_dir = _save(cfg, state, model_cfg, data, version, metrics)
            out["model_dir"] = str(model_dir)
            out["model_version"] = publish(
                run, model_dir, recipe="contrastive", cfg=cfg, dataset_ref=version.ref
            )
        return out


def _setup(
    cfg: Config, model_cfg: Any, info: DistInfo, device: torch.device, n_train: int
) -> TrainState:
    """Model, AdamW and a cosine schedule stepped per batch; ``TrainState.step`` counts epochs."""
    import torch

    from aifab.models.zoo import build_model
    from aifab.train import distributed, loop

    model = distributed.wrap_model(build_model("dual-encoder", model_cfg), info, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    per_epoch = -(-n_train // cfg.batch_size)
    scheduler = loop.warmup_cosine(
        optimizer, warmup_steps=0, total_steps=cfg.epochs * per_epoch, min_lr_ratio=0.1
    )
    return TrainState(model, optimizer, scheduler, info=info)


def _train(cfg: Config, state: TrainState, data: Pairs, device: torch.device, run: Any) -> float:
    """Epochs of in-batch contrastive steps, checkpoints between epochs; returns busy seconds."""
    import numpy as np
    import torch

    from aifab.models.fusion import contrastive_loss
    from aifab.train import checkpointing, distributed, loop
    from aifab.train.datasets import epoch_batches

    ckpt_dir = checkpointing.checkpoint_dir(cfg.checkpoint_dir)
    train, busy, info = data.index["train"], 0.0, state.info
    show = cfg.progress and state.is_main
    with loop.Progress(
        cfg.epochs, start_step=state.step, enabled=show, every_s=cfg.progress_every_s
    ) as bar:
        while state.step < cfg.epochs:
            t0 = time.perf_counter()
            state.model.train()
            total = torch.zeros(2, dtype=torch.float64)
            for b in epoch_batches(len(train), cfg.batch_size, seed=cfg.seed, epoch=state.step):
                rows = train[b]
                if info is not None and info.world_size > 1:
                    # Each replica contrasts its shard (local in-batch negatives).
                    rows = rows[distributed.shard(np.arange(len(rows)), info)]
                if len(rows) < 2:  # a lone pair has no negative to contrast with
                    continue
                loss = contrastive_loss(state.model(**data.batch(rows, device)))
                state.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                state.optimizer.step()
                state.scheduler.step()
                total += torch.tensor([float(loss.detach()), 1.0], dtype=torch.float64)
            if info is not None:
                distributed.all_reduce_sum(total, info)
            busy += time.perf_counter() - t0
            state.step += 1
            mean = float(total[0] / max(1.0, float(total[1])))
            bar.update(state.step, mean, len(train))
            log_metrics(run, {"train_loss": mean}, state.step)
            every = cfg.checkpoint_every
            if ckpt_dir and every and (state.step % every == 0 or state.step == cfg.epochs):
                state.save(ckpt_dir, keep=cfg.keep_checkpoints, micro_batches=0)
    return busy


def recall_at(
    model: Any, data: Pairs, split: str, device: torch.device, ks: tuple[int, ...] = (1, 10)
) -> dict[str, float]:
    """Text-to-image recall@k on ``split``: each caption's image among all the split's images."""
    import torch

    rows = data.index[split]
    if len(rows) == 0:
        return {}
    was_training = model.training
    model.eval()
    with torch.no_grad():
        batch = data.batch(rows, device)
        img = model.encode_image(batch["image"])
        txt = model.encode_text(batch["input_ids"], batch["attention_mask"])
    model.train(was_training)
    return ranks_to_recall(txt @ img.T, ks, prefix=f"{split}_")


def ranks_to_recall(
    scores: torch.Tensor, ks: tuple[int, ...] = (1, 10), prefix: str = ""
) -> dict[str, float]:
    """Recall@k of a ``(queries, gallery)`` score matrix whose true match is the diagonal."""
    own = scores.diagonal()[:, None]
    rank = (scores > own).sum(dim=1)  # 0: the query's own image scores highest
    return {f"{prefix}recall_at_{k}": float((rank < k).double().mean()) for k in ks}


def _save(
    cfg: Config,
    state: TrainState,
    model_cfg: Any,
    data: Pairs,
    version: VersionInfo,
    metrics: dict[str, float],
) -> Path:
    """Write the model directory: weights, sidecar (with preprocessing) and the tokenizer."""
    from aifab.models.checkpoint import save_model

    out = output_dir(cfg.output_dir, "contrastive", state.run_id)
    meta = lineage_meta("contrastive", state.run_id, version, metrics)
    meta["preprocess"] = {
        "modality": "image-text",
        "image_column": cfg.image_column,
        "image_shape": [cfg.channels, cfg.image_size, cfg.image_size],
        "scale": 1 / 255,
        "text_column": cfg.text_column,
        "max_length": cfg.max_length,
    }
    model = state.module.to("cpu")
    save_model(
        out, model, builder="dual-encoder", config=model_cfg, meta=meta, tokenizer=data.tokenizer
    )
    return out


if __name__ == "__main__":
    from aifab.train.submit import load_recipe_config

    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m aifab.train.recipes.contrastive CONFIG [key=value ...]")
    try:
        config = load_recipe_config("contrastive", sys.argv[1], sys.argv[2:])
        print(json.dumps(main(config.model_dump(mode="json", by_alias=True)), default=str))
    except InvalidInputError as exc:
        raise SystemExit(f"error: {exc.message}") from None
