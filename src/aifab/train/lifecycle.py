"""A recipe run's life cycle around its loop, shared by the lm, lora and kge recipes.

The train state a checkpoint saves and a resumed job loads, the MLflow run opened or continued,
one optimizer step, and publishing the result: model directory, lineage, artifacts, registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aifab.core.errors import InvalidInputError, NotFoundError

if TYPE_CHECKING:
    import torch

    from aifab.data.catalog import VersionInfo


def resolve_dataset(ref: str) -> VersionInfo:
    """The dataset version ``ref`` names; a missing one is bad input naming the config key."""
    from aifab.data.catalog import resolve

    try:
        return resolve(ref)
    except NotFoundError as exc:
        raise InvalidInputError(f"dataset: {exc.message}") from None


def model_directory(base: str, key: str = "base") -> Path:
    """The local directory of a model given as a directory or a registered ``NAME[@VERSION]``.

    Args:
        base: the directory, or the registered model reference (downloaded once, cached).
        key: the config key named in errors.

    Raises:
        InvalidInputError: neither an existing directory nor a registered model.
    """
    path = Path(base).expanduser()
    if path.is_dir():
        return path
    looks_like_path = any(sep in base for sep in ("/", "\\")) or base.startswith((".", "~"))
    if path.exists() or looks_like_path:
        raise InvalidInputError(f"{key}: {base} is not a model directory (no such directory)")
    from aifab.track.registry import download_model

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
    """

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    weights: Callable[[torch.nn.Module], dict[str, Any]] | None = None
    load_weights: Callable[[torch.nn.Module, dict[str, Any]], Any] | None = None
    step: int = 0
    run_id: str | None = None
    resumed_from: int | None = None

    def save(self, directory: Path, *, keep: int, micro_batches: int) -> None:
        """Checkpoint after the current step (the data position follows from the step)."""
        from aifab.train import checkpointing

        checkpointing.save_checkpoint(
            directory,
            step=self.step,
            model=self.weights(self.model) if self.weights else self.model.state_dict(),
            optimizer=self.optimizer.state_dict(),
            scheduler=self.scheduler.state_dict(),
            position={"micro_batch": micro_batches},
            extra={"run_id": self.run_id},
            keep=keep,
        )

    def load(self, path: Path) -> None:
        """Continue from a checkpoint (RNG states restored too)."""
        from aifab.train import checkpointing

        ck = checkpointing.load_checkpoint(path)
        (self.load_weights or type(self.model).load_state_dict)(self.model, ck["model"])
        self.optimizer.load_state_dict(ck["optimizer"])
        self.scheduler.load_state_dict(ck["scheduler"])
        self.step = self.resumed_from = int(ck["step"])
        self.run_id = ck["extra"].get("run_id")


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
        tags={"aifab.recipe": recipe},
        datasets=datasets,
        system_metrics=cfg.system_metrics,
    )


def optimizer_step(
    state: TrainState,
    batches: Sequence[Mapping[str, torch.Tensor]],
    device: torch.device,
    *,
    bf16: bool,
    clip_norm: float | None,
) -> float:
    """One optimizer step over micro-batches of model inputs (labels included).

    Returns:
        The micro-batches' mean loss.
    """
    from aifab.train import loop

    state.model.train()
    total = 0.0
    for batch in batches:
        with loop.autocast(device, bf16):
            loss = state.model(**{k: v.to(device) for k, v in batch.items()}).loss
        (loss / len(batches)).backward()
        total += float(loss.detach())
    trainable = (p for p in state.model.parameters() if p.requires_grad)
    loop.clip_gradients(trainable, clip_norm)
    state.optimizer.step()
    state.optimizer.zero_grad(set_to_none=True)
    state.scheduler.step()
    state.step += 1
    return total / len(batches)


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
    run: Any, out: Path, *, recipe: str, cfg: Any, dataset_ref: str, artifact_path: str = "model"
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
