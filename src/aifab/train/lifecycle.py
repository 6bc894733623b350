"""A recipe run's life cycle around its loop, shared by the lm, lora and kge recipes.

The process group of a data-parallel job, the train state a checkpoint saves and a resumed job
loads, the MLflow run opened or continued (rank 0 only), one optimizer step over this rank's
shard of the global batch, and publishing the result: model directory, lineage, registry
(classify, with a loop of its own, shares ``open_run`` and ``publish``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aifab.core.errors import InvalidInputError, NotFoundError, first_line

if TYPE_CHECKING:
    import torch

    from aifab.data.catalog import VersionInfo
    from aifab.train.distributed import DistInfo
    from aifab.train.recipe_config import RecipeConfig


def run_distributed(
    device_name: str, body: Callable[[DistInfo, torch.device], dict[str, Any]]
) -> dict[str, Any]:
    """Join the job's process group (none for one replica), run ``body`` on this rank, leave.

    Args:
        device_name: the recipe's ``device`` setting (auto, cpu, cuda).
        body: the recipe's run, given this rank's place and device.
    """
    from aifab.train import distributed, loop

    info = distributed.init_distributed(loop.pick_device(device_name).type)
    try:
        return body(info, loop.pick_device(device_name, info.local_rank))
    finally:
        distributed.shutdown(info)


def check_batch(batch_size: int, info: DistInfo) -> None:
    """Every replica needs at least one example of each global batch.

    Raises:
        InvalidInputError: ``batch_size`` is smaller than the number of replicas.
    """
    if batch_size < info.world_size:
        raise InvalidInputError(
            f"batch_size: {batch_size} is smaller than the job's {info.world_size} replicas "
            "(the global batch is split over them)"
        )


def main_first(info: DistInfo, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on rank 0, then on the other ranks (which find what rank 0 cached or wrote)."""
    from aifab.train import distributed

    if not info.is_main:
        distributed.barrier(info)
    out = fn()
    if info.is_main:
        distributed.barrier(info)
    return out


def resolve_dataset(ref: str) -> VersionInfo:
    """The dataset version ``ref`` names; a missing one is bad input naming the config key."""
    from aifab.data.catalog import resolve

    try:
        return resolve(ref)
    except NotFoundError as exc:
        raise InvalidInputError(f"dataset: {exc.message}") from None


#: A base model from the Hugging Face Hub: ``hf:org/name`` (downloaded once into the HF cache).
HUB_PREFIX = "hf:"


def _from_hub(repo_id: str, key: str) -> Path:
    """A hub model's local snapshot (needs network, or the model already in the HF cache)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id))
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError, ValueError) as exc:
        first = first_line(exc)
        raise InvalidInputError(
            f"{key}: cannot get {repo_id!r} from the model hub: {first}"
        ) from None


def model_directory(base: str, key: str = "base") -> Path:
    """The local directory of a base model: a directory, ``NAME[@VERSION]`` or ``hf:org/name``.

    Args:
        base: the directory, the registered model reference (``NAME[@VERSION|@ALIAS]`` or
            ``models:/NAME/VERSION``; downloaded once, cached), or a Hugging Face Hub model as
            ``hf:org/name``.
        key: the config key named in errors.

    Raises:
        InvalidInputError: neither an existing directory nor a registered model.
    """
    if base.startswith(HUB_PREFIX):
        return _from_hub(base.removeprefix(HUB_PREFIX), key)
    from aifab.track.registry import MODELS_URI, download_model

    if not base.startswith(MODELS_URI):  # a registry URI is no path, despite its slashes
        path = Path(base).expanduser()
        if path.is_dir():
            return path
        looks_like_path = any(sep in base for sep in ("/", "\\")) or base.startswith((".", "~"))
        if path.exists() or looks_like_path:
            raise InvalidInputError(f"{key}: {base} is not a model directory (no such directory)")
    try:
        return download_model(base)
    except (NotFoundError, InvalidInputError) as exc:
        raise InvalidInputError(
            f"{key}: {base!r} is neither a model directory nor a registered model ({exc.message})"
        ) from None


@dataclass
class TrainState:
    """What the loop mutates and a checkpoint stores.

    ``weights`` reads the trainable state to checkpoint and ``load_weights`` restores it: the
    whole model by default; the lora recipe passes PEFT's adapter-only pair (the base is frozen).
    ``model`` is DDP-wrapped in a data-parallel job (``module`` is the user's model); ``info``
    says which rank this is (None: a single process).
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    weights: Callable[[torch.nn.Module], dict[str, Any]] | None = None
    load_weights: Callable[[torch.nn.Module, dict[str, Any]], Any] | None = None
    step: int = 0
    run_id: str | None = None
    resumed_from: int | None = None
    info: DistInfo | None = None

    @property
    def is_main(self) -> bool:
        """Rank 0 (or a single process): the one that logs, checkpoints and saves."""
        return self.info is None or self.info.is_main

    @property
    def module(self) -> torch.nn.Module:
        """The user's model, outside any DDP wrapper (to evaluate and save)."""
        from aifab.train.distributed import unwrap

        return unwrap(self.model)

    def save(self, directory: Path, *, keep: int, micro_batches: int) -> None:
        """Checkpoint after the current step (the data position follows from the step).

        Replicas hold identical weights, so rank 0 alone writes; the others wait for it.
        """
        from aifab.train import checkpointing, distributed

        if self.is_main:
            module = self.module
            checkpointing.save_checkpoint(
                directory,
                step=self.step,
                model=self.weights(module) if self.weights else module.state_dict(),
                optimizer=self.optimizer.state_dict(),
                scheduler=self.scheduler.state_dict(),
                position={"micro_batch": micro_batches},
                extra={"run_id": self.run_id},
                keep=keep,
            )
        if self.info is not None:
            distributed.barrier(self.info)

    def resume(self, directory: Path | None) -> None:
        """Continue from the newest checkpoint in ``directory``, if any (rank 0 picks it)."""
        from aifab.train import checkpointing, distributed

        latest = checkpointing.latest_checkpoint(directory) if self.is_main else None
        if self.info is not None:
            latest = distributed.broadcast_object(latest, self.info)
        if latest is not None:
            self.load(latest)

    def load(self, path: Path) -> None:
        """Continue from a checkpoint (RNG states restored too)."""
        from aifab.train import checkpointing

        ck = checkpointing.load_checkpoint(path)
        module = self.module
        (self.load_weights or type(module).load_state_dict)(module, ck["model"])
        self.optimizer.load_state_dict(ck["optimizer"])
        self.scheduler.load_state_dict(ck["scheduler"])
        self.step = self.resumed_from = int(ck["step"])
        self.run_id = ck["extra"].get("run_id")


def attach_run(
    state: TrainState, recipe: str, cfg: Any, datasets: Callable[[], list[dict[str, Any]]]
) -> Any:
    """Rank 0 opens (or continues) the MLflow run; every rank learns its id. None off rank 0.

    ``datasets`` builds the run's dataset inputs (called on rank 0 only).
    """
    from aifab.train import distributed

    run = open_run(recipe, cfg, datasets(), state.run_id) if state.is_main else None
    run_id = run.id if run is not None else None
    state.run_id = distributed.broadcast_object(run_id, state.info) if state.info else run_id
    return run


@contextlib.contextmanager
def ending(run: Any) -> Iterator[None]:
    """End ``run`` (None off rank 0) when the block exits: FINISHED, or FAILED on an error."""
    status = "FAILED"
    try:
        yield
        status = "FINISHED"
    finally:
        if run is not None:
            run.end(status)


def summary(
    state: TrainState, cfg: RecipeConfig, metrics: Mapping[str, float], **fields: Any
) -> dict[str, Any]:
    """What a recipe's ``main`` returns; rank 0 fills in ``model_dir`` and ``model_version``."""
    return {
        "run_id": state.run_id,
        "metrics": dict(metrics),
        "resumed_from": state.resumed_from,
        "model_dir": None,
        "model_version": None,
        "registered_as": cfg.register_as,
        **fields,
    }


def log_metrics(run: Any, metrics: Mapping[str, float], step: int) -> None:
    """Log to the run; a no-op off rank 0 (where there is no run)."""
    if run is not None:
        run.log_metrics(metrics, step)


def open_run(recipe: str, cfg: Any, datasets: list[dict[str, Any]], run_id: str | None) -> Any:
    """Start the recipe's MLflow run, or continue the one a checkpoint names.

    ``cfg`` is the recipe config (logged as params) with ``experiment``, ``run_name`` and
    ``system_metrics``.
    """
    from aifab.track.tracking import resume_run, start_run

    if run_id is not None:
        return resume_run(run_id, system_metrics=cfg.system_metrics)
    return start_run(
        cfg.experiment,
        run_name=cfg.run_name,
        params={"recipe": recipe, **cfg.model_dump(mode="json", by_alias=True)},
        tags={"aifab.recipe": recipe, **job_tags()},
        datasets=datasets,
        system_metrics=cfg.system_metrics,
    )


def job_tags() -> dict[str, str]:
    """Run tags naming the scheduler job this process belongs to (none outside a job)."""
    job = os.environ.get("AIFAB_JOB_ID")
    return (
        {"aifab.job_id": job, "aifab.job_attempt": os.environ.get("AIFAB_JOB_ATTEMPT", "")}
        if job
        else {}
    )


def optimizer_step(
    state: TrainState,
    batches: Sequence[Mapping[str, torch.Tensor]],
    device: torch.device,
    *,
    bf16: bool,
    clip_norm: float | None,
) -> float:
    """One optimizer step over global micro-batches of model inputs (labels included).

    In a data-parallel job each rank trains on its rows of every micro-batch; its mean loss is
    weighted by its share of the micro-batch's target tokens, so DDP's gradient average is the
    gradient a single process gets from the whole micro-batch.

    Returns:
        The micro-batches' mean loss (over all replicas).
    """
    import torch

    from aifab.train import distributed, loop

    info = state.info
    world = info.world_size if info is not None else 1
    state.model.train()
    total = torch.zeros(1, dtype=torch.float64)
    for i, batch in enumerate(batches):
        part, share = _shard(batch, info) if info is not None and world > 1 else (batch, 1.0)
        with distributed.maybe_no_sync(state.model, i + 1 == len(batches)):
            with loop.autocast(device, bf16):
                loss = state.model(**{k: v.to(device) for k, v in part.items()}).loss
            (loss * share / len(batches)).backward()
        total += float(loss.detach()) * share / world
    if info is not None:
        distributed.all_reduce_sum(total, info)
    trainable = (p for p in state.model.parameters() if p.requires_grad)
    loop.clip_gradients(trainable, clip_norm)
    state.optimizer.step()
    state.optimizer.zero_grad(set_to_none=True)
    state.scheduler.step()
    state.step += 1
    return float(total) / len(batches)


def _shard(
    batch: Mapping[str, torch.Tensor], info: DistInfo
) -> tuple[dict[str, torch.Tensor], float]:
    """Rows of a global micro-batch that this rank trains on, and their loss weight.

    The weight is the world size times the rows' share of the micro-batch's target tokens.
    """
    import numpy as np
    import torch

    from aifab.train.distributed import shard
    from aifab.train.text_data import IGNORE_INDEX

    labels = batch["labels"]
    rows = torch.from_numpy(shard(np.arange(len(labels)), info))
    # The causal-LM loss averages over shifted targets: the first position is never predicted.
    targets = labels[:, 1:] != IGNORE_INDEX
    share = float(targets[rows].sum()) / max(1.0, float(targets.sum()))
    return {k: v[rows] for k, v in batch.items()}, share * info.world_size


def output_dir(configured: str | None, recipe: str, run_id: str | None) -> Path:
    """Where a recipe writes its model: as configured, else ``artifacts/models/<recipe>-<run>``."""
    from aifab.core.workspace import get_workspace

    if configured:
        return Path(configured)
    return get_workspace().artifacts / "models" / f"{recipe}-{run_id}"


def lineage_meta(
    recipe: str, run_id: str | None, version: VersionInfo, metrics: Mapping[str, float]
) -> dict[str, Any]:
    """The lineage a model directory's sidecar carries: recipe, run, dataset, code version."""
    from aifab.track.codeversion import code_version

    return {
        "recipe": recipe,
        "run_id": run_id,
        "datasets": [{"ref": version.ref, "digest": version.content_hash}],
        "metrics": dict(metrics),
        "code_version": {k: v for k, v in code_version().items() if k != "packages"},
    }


def publish(
    run: Any,
    out: Path,
    *,
    recipe: str,
    cfg: RecipeConfig,
    dataset_ref: str,
    artifact_path: str = "model",
) -> int | None:
    """Log the config and ``out`` to the run; register it when ``cfg.register_as`` is set.

    Returns:
        The registered version (``cfg.alias`` now points at it), or None.
    """
    from aifab.track.registry import register_model, set_alias

    run.log_dict(cfg.model_dump(mode="json", by_alias=True), "config.json")
    run.log_artifacts(out, artifact_path)
    if not cfg.register_as:
        return None
    tags = {"recipe": recipe, "dataset": dataset_ref}
    version = int(register_model(run.id, artifact_path, cfg.register_as, tags=tags)["version"])
    if cfg.alias:
        set_alias(cfg.register_as, cfg.alias, version)
    return version
