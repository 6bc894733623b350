"""Data-parallel training for recipes: process groups, DDP/FSDP, batch shards, rank-0 saving.

The process group comes from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (gloo on CPU, nccl on GPU);
each rank trains on its shard of every global batch; full state dicts are gathered for rank 0
to save. ``strategy: deepspeed`` passes the recipe's ``deepspeed`` config (ZeRO stage...) to
``deepspeed.initialize`` when ``import deepspeed`` works, and is refused otherwise (DeepSpeed is
not installed on aifab's CI, so that path is untested). Multi-node jobs get the same environment
variables from the job scheduler's Ray and Volcano executors; under Ray Train
(:mod:`aifab.train.distributed_ray`) the process group Ray made is joined as it is.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist

from aifab.core.errors import InvalidInputError

Strategy = Literal["ddp", "fsdp", "deepspeed"]

__all__ = [
    "DistInfo",
    "Strategy",
    "all_reduce_sum",
    "barrier",
    "broadcast_object",
    "deepspeed_available",
    "deepspeed_initialize",
    "init_distributed",
    "load_model_state",
    "load_optimizer_state",
    "maybe_no_sync",
    "model_state",
    "optimizer_state",
    "shard",
    "shutdown",
    "unwrap",
    "wrap_model",
]


@dataclass(frozen=True)
class DistInfo:
    """The place of this process in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def enabled(self) -> bool:
        """True when a process group is up (more than one replica)."""
        return self.backend is not None

    @property
    def is_main(self) -> bool:
        """Rank 0: the only replica that logs to MLflow and writes files."""
        return self.rank == 0


def init_distributed(device_type: str = "cpu", timeout_s: float = 300.0) -> DistInfo:
    """Join the process group described by the torch.distributed environment variables.

    A single replica (no ``WORLD_SIZE`` or ``WORLD_SIZE=1``) gets a plain :class:`DistInfo` and
    no process group. The backend is nccl for CUDA devices, gloo otherwise.
    """
    if dist.is_initialized():
        # Ray Train (aifab.train.distributed_ray) made the group already: join it as it is.
        # Ray sets LOCAL_RANK too, which picks this worker's GPU.
        local_rank, backend = int(os.environ.get("LOCAL_RANK", "0")), str(dist.get_backend())
        if backend == "nccl":
            torch.cuda.set_device(local_rank % torch.cuda.device_count())
        return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, backend)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    if world <= 1:
        return DistInfo(rank=0, world_size=1, local_rank=0)
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v)]
    if missing:
        raise InvalidInputError(f"WORLD_SIZE={world} but {', '.join(missing)} is not set")
    backend = "nccl" if device_type == "cuda" else "gloo"
    if backend == "nccl":  # collectives run on the current device: make it this rank's GPU
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    if not dist.is_initialized():
        dist.init_process_group(
            backend,
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    return DistInfo(rank=rank, world_size=world, local_rank=local_rank, backend=backend)


def shutdown(info: DistInfo) -> None:
    """Leave the process group (a no-op for a single replica)."""
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def barrier(info: DistInfo) -> None:
    """Wait for every replica."""
    if info.enabled:
        dist.barrier()


def broadcast_object(obj: Any, info: DistInfo) -> Any:
    """Rank 0's ``obj`` on every rank (e.g. the checkpoint to resume, the MLflow run id)."""
    if not info.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_reduce_sum(tensor: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum ``tensor`` over replicas (in place) and return it (CPU tensors work on nccl too)."""
    if not info.enabled:
        return tensor
    on_gpu = info.backend == "nccl" and tensor.device.type != "cuda"
    work = tensor.to(torch.device("cuda", torch.cuda.current_device())) if on_gpu else tensor
    dist.all_reduce(work, op=dist.ReduceOp.SUM)
    if work is not tensor:
        tensor.copy_(work.cpu())
    return tensor


def shard(global_batch: np.ndarray, info: DistInfo) -> np.ndarray:
    """The contiguous part of a global batch (sample indices) that this rank trains on.

    Every replica draws the same seeded global batches, so together they see exactly the
    samples a single process would, in the same steps. Unlike ``DistributedSampler`` nothing
    is padded or repeated; a rank may get one sample fewer than another.
    """
    parts = np.array_split(global_batch, info.world_size)
    return parts[info.rank]


def wrap_model(
    model: torch.nn.Module, info: DistInfo, device: torch.device, strategy: Strategy = "ddp"
) -> torch.nn.Module:
    """Move ``model`` to ``device`` and wrap it for data parallelism (nothing for one replica).

    ``fsdp`` shards parameters, gradients and optimizer state (FSDP2 ``fully_shard``);
    ``deepspeed`` is wrapped by :func:`deepspeed_initialize` instead.
    """
    model = model.to(device)
    if not info.enabled or strategy == "deepspeed":
        return model
    if strategy == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (info.world_size,))
        fully_shard(model, mesh=mesh)
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The user's module inside a DDP or DeepSpeed wrapper."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, torch.nn.Module) else model


@contextlib.contextmanager
def maybe_no_sync(model: torch.nn.Module, sync: bool) -> Iterator[None]:
    """Skip DDP's gradient all-reduce on micro-batches that do not end an accumulation window."""
    no_sync = getattr(model, "no_sync", None)
    if sync or no_sync is None:
        yield
    else:
        with no_sync():
            yield


def _is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def model_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The full (unsharded) state dict on the CPU; a collective call under FSDP.

    Under FSDP only rank 0 receives the tensors (the others get an empty dict), which is all
    saving needs; :func:`load_model_state` broadcasts rank 0's copy back.
    """
    if _is_sharded(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        full: dict[str, torch.Tensor] = get_model_state_dict(model, options=opts)  # type: ignore[assignment]
        return full
    return {k: v.detach().cpu().clone() for k, v in unwrap(model).state_dict().items()}


def load_model_state(model: torch.nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Load a full state dict into a plain, DDP or FSDP model."""
    if _is_sharded(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        # Only rank 0's copy is read (other ranks may hold an empty dict, see model_state).
        opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_model_state_dict(model, dict(state), options=opts)
        return
    unwrap(model).load_state_dict(dict(state))


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's full state dict; a collective call under FSDP."""
    if _is_sharded(model):
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return dict(get_optimizer_state_dict(model, optimizer, options=opts))
    return dict(optimizer.state_dict())


def load_optimizer_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]
) -> None:
    """Load what :func:`optimizer_state` returned."""
    if _is_sharded(model):
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
        set_optimizer_state_dict(model, optimizer, dict(state), options=opts)
        return
    optimizer.load_state_dict(dict(state))


def deepspeed_available() -> bool:
    """Whether ``import deepspeed`` works here."""
    try:
        import deepspeed  # noqa: F401
    except Exception:  # a broken install raises more than ImportError
        return False
    return True


def deepspeed_initialize(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, config: Mapping[str, Any]
) -> tuple[Any, Any]:
    """Hand ``model``, ``optimizer`` and a DeepSpeed config (ZeRO stage etc.) to DeepSpeed.

    The config is passed through untouched. Returns ``(engine, optimizer)``; the loop then
    calls ``engine.backward(loss)`` and ``engine.step()``.

    Raises:
        InvalidInputError: DeepSpeed is not installed.
    """
    if not deepspeed_available():
        raise InvalidInputError(
            "strategy: deepspeed needs the deepspeed package (pip install deepspeed)"
        )
    import deepspeed

    engine, ds_optimizer, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=dict(config)
    )
    return engine, ds_optimizer
