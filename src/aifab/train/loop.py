"""Small pieces every training loop calls, each a named function or tiny class.

Seeding, deterministic mode, the warmup+cosine schedule, gradient accumulation and clipping,
bf16 autocast, early stopping and a progress bar.

Only recipes import this module (it imports torch at the top).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import sys
import time
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any, Literal

import numpy as np
import torch

from aifab.core.errors import InvalidInputError

__all__ = [
    "EarlyStopping",
    "Progress",
    "autocast",
    "bf16_supported",
    "clip_gradients",
    "is_update_step",
    "iterate_chunks",
    "pick_device",
    "seed_everything",
    "set_deterministic",
    "warmup_cosine",
]


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (all devices)."""
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.manual_seed(seed)


def set_deterministic(enabled: bool, threads: int | None = None) -> None:
    """Switch torch to deterministic kernels and a fixed thread count.

    Bitwise-reproducible runs need both: some kernels are nondeterministic by design, and CPU
    reductions split work by thread count, so a different count changes float rounding.

    Args:
        enabled: turn deterministic algorithms on (raising on ops that have none) or off.
        threads: intra-op threads; default 1 when ``enabled`` (else torch's choice).
    """
    if enabled:
        # cuBLAS reads this when its first handle is created; harmless on CPU.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
        threads = threads or 1
    # The call imports torch's compiler stack (seconds): skip it when nothing changes.
    if torch.are_deterministic_algorithms_enabled() != enabled:
        torch.use_deterministic_algorithms(enabled)
    if threads:
        torch.set_num_threads(threads)


def pick_device(name: str = "auto", local_rank: int = 0) -> torch.device:
    """``auto`` -> this replica's CUDA device when there is one, else the CPU.

    Raises:
        InvalidInputError: ``cuda`` was asked for on a machine without a GPU.
    """
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise InvalidInputError("device: cuda was asked for but torch sees no GPU here")
    if name == "cuda":
        return torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
    return torch.device(name)


def warmup_cosine(
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int,
    total_steps: int,
    min_lr_ratio: float = 0.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup to the base LR, then cosine decay to ``min_lr_ratio`` x base LR.

    Warmup lasts ``warmup_steps``; the decay ends at ``total_steps`` and holds afterwards.
    """

    def factor(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return (step + 1) / warmup_steps
        span = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / span)
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def is_update_step(batch_index: int, accumulate: int, num_batches: int) -> bool:
    """Whether the optimizer steps after micro-batch ``batch_index`` (0-based) of an epoch.

    Every ``accumulate`` micro-batches, and at the epoch's last batch so no gradient is carried
    into the next epoch (which keeps checkpoints at update boundaries only).
    """
    return (batch_index + 1) % accumulate == 0 or batch_index + 1 == num_batches


def clip_gradients(parameters: Iterable[torch.nn.Parameter], max_norm: float | None) -> float:
    """Clip the global gradient norm to ``max_norm`` (None: measure only); return the norm."""
    params = [p for p in parameters if p.grad is not None]
    if not params:
        return 0.0
    if max_norm is None:
        norms = torch.stack([p.grad.detach().norm(2) for p in params if p.grad is not None])
        return float(norms.norm(2))
    return float(torch.nn.utils.clip_grad_norm_(params, max_norm))


def bf16_supported(device: torch.device) -> bool:
    """Whether bf16 autocast runs on ``device`` (CPU autocast always does; CUDA needs Ampere+)."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return device.type == "cpu"


def autocast(device: torch.device, enabled: bool) -> contextlib.AbstractContextManager[Any]:
    """bf16 autocast on ``device`` when ``enabled`` and supported, else a no-op context."""
    if not enabled or not bf16_supported(device):
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


class EarlyStopping:
    """Stop when a validation metric has not improved for ``patience`` evaluations.

    Its state is part of a checkpoint, so a resumed run stops at the same step.
    """

    def __init__(
        self, mode: Literal["min", "max"] = "max", patience: int = 5, min_delta: float = 0.0
    ) -> None:
        self.mode = mode
        self.patience = patience
        self.min_delta = min_delta
        self.best: float | None = None
        self.best_step = -1
        self.bad_evals = 0

    def update(self, value: float, step: int) -> bool:
        """Record one evaluation; return True when it is a new best."""
        better = self.best is None or (
            value > self.best + self.min_delta
            if self.mode == "max"
            else value < self.best - self.min_delta
        )
        if better:
            self.best, self.best_step, self.bad_evals = value, step, 0
        else:
            self.bad_evals += 1
        return better

    @property
    def should_stop(self) -> bool:
        """True once ``patience`` evaluations in a row brought no improvement."""
        return self.bad_evals >= self.patience

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint stores."""
        return {"best": self.best, "best_step": self.best_step, "bad_evals": self.bad_evals}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
        self.best, self.best_step = state["best"], int(state["best_step"])
        self.bad_evals = int(state["bad_evals"])


class Progress:
    """Training progress: a live rich bar on a terminal, else a plain line every few seconds.

    The plain lines go to stdout, which is the job's log: ``aifab jobs logs -f``, the
    dashboard's job page and a piped or CI run all see them. Use as a context manager; call
    :meth:`update` after each optimizer step.
    """

    def __init__(
        self,
        total_steps: int,
        *,
        start_step: int = 0,
        enabled: bool = True,
        every_s: float = 10.0,
    ) -> None:
        self.live = enabled and sys.stderr.isatty()
        self.plain = enabled and not self.live
        self.total = total_steps
        self.start_step = start_step
        self.every_s = every_s
        self._samples = 0
        self._t0 = time.perf_counter()
        self._last_line = self._t0
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(
                "train", total=self.total, completed=self.start_step, info=""
            )
        return self

    def update(self, step: int, loss: float, samples: int) -> None:
        """Advance to ``step`` showing ``loss`` and samples/s since the start."""
        self._samples += samples
        now = time.perf_counter()
        rate = self._samples / max(1e-9, now - self._t0)
        if self._bar is not None:
            self._bar.update(
                self._task, completed=step, info=f"loss {loss:.4f}  {rate:,.0f} samples/s"
            )
        elif self.plain and (now - self._last_line >= self.every_s or step >= self.total):
            self._last_line = now
            print(self._line(step, loss, rate, now), flush=True)

    def _line(self, step: int, loss: float, rate: float, now: float) -> str:
        done = step - self.start_step
        left = (now - self._t0) / done * (self.total - step) if done > 0 else 0.0
        percent = 100 * step // max(1, self.total)
        return (
            f"train step {step}/{self.total} ({percent}%) loss {loss:.4f} "
            f"{rate:,.0f} samples/s eta {_clock(left)}"
        )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)


def _clock(seconds: float) -> str:
    """``h:mm:ss`` (or ``m:ss``) of a duration."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def iterate_chunks(n: int, size: int) -> Iterator[slice]:
    """Slices covering ``range(n)`` in chunks of ``size`` (for batched evaluation)."""
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))
