"""Full train state on disk for exact resume, each checkpoint written atomically.

A checkpoint holds the model, optimizer and scheduler states, the Python/NumPy/torch RNG states
and the data position (epoch and next batch); it is written to a temp file, then renamed.

The checkpoint directory is ``checkpoint_dir`` from the recipe config or ``$AIFAB_CHECKPOINT_DIR``
(set by the job scheduler and stable across attempts, so a preempted job resumes).
With ``AIFAB_STORAGE_URI`` set, checkpoints in the workspace are mirrored to the object store
under the same key (each one PUT, atomic) and fetched from it when listed, so an attempt on
another node resumes from them.
"""

from __future__ import annotations

import os
import pickle
import random
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from aifab.core.atomic import atomic_path
from aifab.core.errors import InvalidInputError, first_line
from aifab.core.settings import get_settings
from aifab.core.storage import Store, get_store

ENV_VAR = "AIFAB_CHECKPOINT_DIR"
FORMAT = "aifab.train_state/1"
_FILE = re.compile(r"^step-(\d{9})\.pt$")

__all__ = [
    "ENV_VAR",
    "checkpoint_dir",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
]


def checkpoint_dir(configured: str | Path | None = None) -> Path | None:
    """The configured directory, else ``$AIFAB_CHECKPOINT_DIR``, else None (no checkpoints)."""
    chosen = configured or os.environ.get(ENV_VAR)
    return Path(chosen).expanduser() if chosen else None


def rng_state() -> dict[str, Any]:
    """Every global generator's state, as tensors and numbers (safe for ``weights_only`` load)."""
    py_version, py_keys, py_gauss = random.getstate()
    _, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "python": {
            "version": py_version,
            "keys": torch.tensor(py_keys, dtype=torch.int64),
            "gauss": py_gauss,
        },
        "numpy": {
            "keys": torch.from_numpy(np.asarray(np_keys, dtype=np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "gauss": float(np_gauss),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`rng_state` captured."""
    py = state["python"]
    random.setstate((py["version"], tuple(int(k) for k in py["keys"].tolist()), py["gauss"]))
    npy = state["numpy"]
    np.random.set_state(
        (
            "MT19937",
            npy["keys"].numpy().astype(np.uint32),
            npy["pos"],
            npy["has_gauss"],
            npy["gauss"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _stored(directory: Path) -> tuple[Store, str] | None:
    """The object store and key prefix mirroring ``directory``; None when local or outside."""
    store = get_store()
    if store.is_local:
        return None
    try:
        rel = directory.expanduser().resolve().relative_to(get_settings().resolved_home)
    except ValueError:
        return None  # a directory the user chose outside the workspace stays theirs
    return store, rel.as_posix()


def list_checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoints in ``directory``, oldest step first (temp files are ignored).

    Checkpoints only the object store has (written on another node) are fetched first.
    """
    if (mirror := _stored(directory)) is not None:
        store, prefix = mirror
        for key in store.list(prefix):
            name = key.rsplit("/", 1)[-1]
            if _FILE.match(name) and not (directory / name).is_file():
                store.get_file(key, directory / name)
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if _FILE.match(p.name)]
    return sorted(found, key=lambda p: p.name)


def latest_checkpoint(directory: Path | None) -> Path | None:
    """The checkpoint with the highest step in ``directory``, or None."""
    if directory is None:
        return None
    found = list_checkpoints(directory)
    return found[-1] if found else None


def save_checkpoint(
    directory: Path,
    *,
    step: int,
    model: Mapping[str, Any],
    optimizer: Mapping[str, Any],
    scheduler: Mapping[str, Any] | None,
    position: Mapping[str, int],
    extra: Mapping[str, Any] | None = None,
    keep: int = 2,
) -> Path:
    """Write the train state after optimizer step ``step``; keep the newest ``keep`` files.

    Args:
        directory: where checkpoints live (created if missing).
        step: optimizer steps done so far.
        model: the model's (full) state dict.
        optimizer: the optimizer's state dict.
        scheduler: the LR scheduler's state dict, if any.
        position: where the data stream continues, e.g. ``{"epoch": 2, "batch": 7}``
            (the next batch to train on).
        extra: anything else the recipe must restore (early stopping, run id, best weights).
        keep: how many checkpoints to retain (older ones are deleted after the write).

    Returns:
        The checkpoint file.
    """
    state = {
        "format": FORMAT,
        "step": int(step),
        "model": dict(model),
        "optimizer": dict(optimizer),
        "scheduler": dict(scheduler) if scheduler is not None else None,
        "rng": rng_state(),
        "position": {k: int(v) for k, v in position.items()},
        "extra": dict(extra or {}),
        "saved_at": time.time(),
    }
    target = directory / f"step-{step:09d}.pt"
    with atomic_path(target) as tmp:
        torch.save(state, tmp)
    mirror = _stored(directory)
    if mirror is not None:
        mirror[0].put_file(target, f"{mirror[1]}/{target.name}")
    for old in list_checkpoints(directory)[: -max(1, keep)]:
        old.unlink(missing_ok=True)
        if mirror is not None:
            mirror[0].delete(f"{mirror[1]}/{old.name}")
    return target


def load_checkpoint(path: Path, *, restore_rng: bool = True) -> dict[str, Any]:
    """Read a checkpoint (tensors on the CPU) and, by default, restore the RNG states.

    The caller loads ``model``, ``optimizer`` and ``scheduler`` into its objects and continues
    at ``position``.

    Raises:
        InvalidInputError: the file is unreadable or not an aifab train state.
    """
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError) as exc:
        first = first_line(exc)
        raise InvalidInputError(f"{path}: not a readable checkpoint ({first})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise InvalidInputError(f"{path}: not an aifab train state ({FORMAT})")
    if restore_rng:
        set_rng_state(state["rng"])
    return state
