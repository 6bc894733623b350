"""Run a training recipe under Ray Train: one ``TorchTrainer`` worker per replica.

Ray Train starts the workers and their torch process group (gloo on CPU, nccl on GPU);
:func:`aifab.train.distributed.init_distributed` joins that group instead of building its own,
so every recipe runs unchanged. Checkpoints and results go under
``<workspace>/artifacts/ray-train``. As a recipe runner, e.g. in a JobSpec's ``run.command`` on
any executor::

    python -m aifab.train.distributed_ray classify config.json --workers 4 [--gpu]
        [--address ray://head:10001] [key=value ...]

It connects to ``--address`` (or ``RAY_ADDRESS``, or starts a local Ray), prints rank 0's
summary as JSON and exits non-zero when training fails.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aifab.core.errors import AifabError, InvalidInputError

__all__ = ["run_with_ray_train"]

#: Driver environment the workers need to find the same workspace, tracking URI and hub setting.
_FORWARDED_ENV = ("AIFAB_", "MLFLOW_", "HF_")
#: The file in rank 0's checkpoint that carries its summary back to the driver.
_SUMMARY = "aifab-summary.json"


def _worker_loop(loop_config: dict[str, Any]) -> None:
    """Ray Train's ``train_loop_per_worker``: run the recipe and report rank 0's summary."""
    import ray.train
    import torch.distributed as dist

    from aifab.train import distributed
    from aifab.train.recipes import run_recipe

    os.environ.update(loop_config["env"])
    info = distributed.init_distributed("cuda" if loop_config["use_gpu"] else "cpu")
    # Who joined the group, gathered before the recipe (which leaves the group when it ends).
    me = {"rank": info.rank, "host": socket.gethostname(), "pid": os.getpid()}
    workers: list[Any] = [me]
    if info.enabled:
        workers = [None] * info.world_size
        dist.all_gather_object(workers, me)
    summary = run_recipe(loop_config["recipe"], loop_config["config"])
    summary["ray_train"] = {
        "world_size": info.world_size,
        "backend": info.backend,
        "workers": workers,
    }
    # Every worker must report. Ray Train keeps only metrics that come with a checkpoint, so
    # rank 0 hands its summary back as a one-file checkpoint (persisted under storage_path).
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = None
        if info.is_main:
            (Path(tmp) / _SUMMARY).write_text(json.dumps(summary, default=str))
            checkpoint = ray.train.Checkpoint.from_directory(tmp)
        ray.train.report({"steps": summary.get("steps", 0)}, checkpoint=checkpoint)


def run_with_ray_train(
    recipe: str,
    config: Mapping[str, Any],
    *,
    num_workers: int,
    use_gpu: bool = False,
    resources_per_worker: Mapping[str, float] | None = None,
    address: str | None = None,
) -> dict[str, Any]:
    """Train ``recipe`` with ``config`` on ``num_workers`` Ray Train workers.

    Args:
        recipe: A recipe name (``aifab.train.recipes.RECIPE_MAINS``).
        config: The recipe's config (validated by the recipe on every worker).
        num_workers: Replicas (data-parallel ranks).
        use_gpu: One GPU per worker and the nccl backend.
        resources_per_worker: Ray resources per worker, e.g. ``{"CPU": 2}``.
        address: The Ray cluster to join when Ray is not initialised yet (default:
            ``RAY_ADDRESS`` or a new local Ray).

    Returns:
        Rank 0's recipe summary plus ``ray_train`` (world size, backend, workers, result path).

    Raises:
        InvalidInputError: ``num_workers`` < 1.
        NotFoundError: Unknown recipe.
        ray.train.TrainingFailedError: A worker failed.
    """
    import ray
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    from aifab.train.recipes import RECIPE_MAINS

    if num_workers < 1:
        raise InvalidInputError(f"num_workers: must be >= 1, got {num_workers}")
    RECIPE_MAINS.get(recipe)  # an unknown recipe fails here, before any worker starts
    if not ray.is_initialized():
        from aifab.core.extras import quiet_ray_auth_notice

        quiet_ray_auth_notice()
        ray.init(address=address)
    run_config = _run_config()
    env = {k: v for k, v in os.environ.items() if k.startswith(_FORWARDED_ENV)}
    loop_config = {"recipe": recipe, "config": dict(config), "env": env, "use_gpu": use_gpu}
    trainer = TorchTrainer(
        _worker_loop,
        train_loop_config=loop_config,
        scaling_config=ScalingConfig(
            num_workers=num_workers,
            use_gpu=use_gpu,
            resources_per_worker=dict(resources_per_worker) if resources_per_worker else None,
        ),
        run_config=run_config,
    )
    result = trainer.fit()
    if result.checkpoint is None:  # fit() raises when a worker fails, so this is Ray's bug
        raise RuntimeError(f"Ray Train run {result.path} returned no summary checkpoint")
    with result.checkpoint.as_directory() as directory:
        summary: dict[str, Any] = json.loads((Path(directory) / _SUMMARY).read_text())
    summary["ray_train"]["path"] = str(result.path)
    return summary


def _run_config() -> Any:
    """Where Ray Train keeps its checkpoints and results: the workspace, or the object store.

    Ray Train's workers on other nodes upload their checkpoints to ``storage_path``: a
    directory on the driver's disk reaches none of them, so with ``AIFAB_STORAGE_URI`` set it
    is ``artifacts/ray-train`` on the store (through pyarrow's wrapper of its fsspec
    filesystem).
    """
    from ray.train import RunConfig

    from aifab.core.storage import get_store
    from aifab.core.workspace import get_workspace

    store = get_store()
    if store.is_local:
        storage = get_workspace().artifacts / "ray-train"
        storage.mkdir(parents=True, exist_ok=True)
        return RunConfig(storage_path=str(storage))
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    return RunConfig(
        storage_path=store.path("artifacts/ray-train"),
        storage_filesystem=PyFileSystem(FSSpecHandler(store.fs)),
    )


def _main(argv: list[str] | None = None) -> None:
    """The recipe runner: ``python -m aifab.train.distributed_ray RECIPE CONFIG --workers N``."""
    from aifab.train.submit import load_recipe_config

    parser = argparse.ArgumentParser(
        prog="python -m aifab.train.distributed_ray", description="Run a recipe under Ray Train."
    )
    parser.add_argument("recipe", help="recipe name, e.g. classify")
    parser.add_argument("config", help="recipe config file (JSON or YAML)")
    parser.add_argument("overrides", nargs="*", help="key=value config overrides")
    parser.add_argument("--workers", type=int, default=1, help="Ray Train workers (replicas)")
    parser.add_argument("--gpu", action="store_true", help="one GPU per worker")
    parser.add_argument("--address", default=None, help="Ray cluster address")
    args = parser.parse_args(argv)
    try:
        cfg = load_recipe_config(args.recipe, args.config, args.overrides)
        summary = run_with_ray_train(
            args.recipe,
            cfg.model_dump(mode="json", by_alias=True),
            num_workers=args.workers,
            use_gpu=args.gpu,
            address=args.address,
        )
    except AifabError as exc:
        raise SystemExit(f"error: {exc.message}") from None
    print(json.dumps(summary, default=str))


if __name__ == "__main__":
    _main()
