"""Resource vectors (CPU, memory, GPU) and the arithmetic the scheduler needs on them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_EPS = 1e-9


@dataclass(frozen=True)
class Resources:
    """An amount of CPU cores, memory (MiB) and whole GPUs."""

    cpu: float = 0.0
    memory_mb: float = 0.0
    gpu: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu + other.cpu, self.memory_mb + other.memory_mb, self.gpu + other.gpu
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.cpu - other.cpu, self.memory_mb - other.memory_mb, self.gpu - other.gpu
        )

    def times(self, n: int) -> Resources:
        """Return ``n`` times this amount (one replica -> a gang of ``n``)."""
        return Resources(self.cpu * n, self.memory_mb * n, self.gpu * n)

    def fits_in(self, other: Resources) -> bool:
        """True when every dimension is at most ``other``'s."""
        return (
            self.cpu <= other.cpu + _EPS
            and self.memory_mb <= other.memory_mb + _EPS
            and self.gpu <= other.gpu
        )

    def dominant_share(self, total: Resources) -> float:
        """The largest fraction of ``total`` this amount takes in any dimension (DRF)."""
        shares = [
            used / cap
            for used, cap in (
                (self.cpu, total.cpu),
                (self.memory_mb, total.memory_mb),
                (self.gpu, total.gpu),
            )
            if cap > 0
        ]
        return max(shares, default=0.0)

    def shortfall(self, available: Resources) -> str:
        """Name the dimensions where this amount exceeds ``available``, with the numbers."""
        parts = []
        if self.cpu > available.cpu + _EPS:
            parts.append(f"cpu {self.cpu:g} > {max(available.cpu, 0):g}")
        if self.memory_mb > available.memory_mb + _EPS:
            parts.append(f"memory {self.memory_mb:g} MiB > {max(available.memory_mb, 0):g} MiB")
        if self.gpu > available.gpu:
            parts.append(f"gpu {self.gpu} > {max(available.gpu, 0)}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"cpu": self.cpu, "memory_mb": self.memory_mb, "gpu": self.gpu}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Resources:
        """Inverse of :meth:`to_dict` (missing keys are zero)."""
        d = d or {}
        return cls(float(d.get("cpu", 0.0)), float(d.get("memory_mb", 0.0)), int(d.get("gpu", 0)))


ZERO = Resources()
_UNLIMITED_GPU = 1 << 30


def limit_from_dict(d: dict[str, Any]) -> Resources:
    """A capability stored as only the dimensions it limits; missing ones are unlimited."""
    return Resources(
        float(d.get("cpu", float("inf"))),
        float(d.get("memory_mb", float("inf"))),
        int(d.get("gpu", _UNLIMITED_GPU)),
    )


def total(items: list[Resources]) -> Resources:
    """Sum of resource amounts."""
    out = ZERO
    for r in items:
        out = out + r
    return out
