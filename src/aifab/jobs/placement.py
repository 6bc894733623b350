"""Where replicas fit: nodes and a fast index of their free resources (best-fit gang placement)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aifab.jobs.resources import ZERO, Resources


@dataclass(frozen=True)
class Node:
    """A machine: its capacity and what is in use."""

    name: str
    capacity: Resources
    used: Resources = ZERO


class Cluster:
    """Free resources per node, indexed by free GPUs so gang placement stays fast at scale."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.free: dict[str, Resources] = {}
        self.by_gpu: dict[int, set[str]] = defaultdict(set)
        # Plain sums: this runs over every node each cycle (1,000s in the simulator).
        ccpu = cmem = fcpu = fmem = 0.0
        cgpu = fgpu = 0
        for n in nodes:
            c, u = n.capacity, n.used
            free = (
                c
                if u is ZERO
                else Resources(c.cpu - u.cpu, c.memory_mb - u.memory_mb, c.gpu - u.gpu)
            )
            ccpu, cmem, cgpu = ccpu + c.cpu, cmem + c.memory_mb, cgpu + c.gpu
            fcpu, fmem, fgpu = fcpu + free.cpu, fmem + free.memory_mb, fgpu + free.gpu
            self.free[n.name] = free
            self.by_gpu[free.gpu].add(n.name)
        self.capacity = Resources(ccpu, cmem, cgpu)
        self.total_free = Resources(fcpu, fmem, fgpu)

    def _set(self, name: str, free: Resources) -> None:
        old = self.free.get(name)
        if old is not None:
            self.by_gpu[old.gpu].discard(name)
        self.free[name] = free
        self.by_gpu[free.gpu].add(name)

    def place(self, replica: Resources, count: int) -> list[str] | None:
        """Best-fit nodes for ``count`` replicas (fewest spare GPUs first), or None."""
        if not replica.times(count).fits_in(self.total_free):
            return None
        taken: dict[str, Resources] = {}
        chosen: list[str] = []
        gpu_levels = sorted(g for g, names in self.by_gpu.items() if names and g >= replica.gpu)
        level_names: dict[int, list[str]] = {}
        for _ in range(count):
            pick = None
            for g in gpu_levels:
                if g not in level_names:
                    level_names[g] = sorted(self.by_gpu[g])
                for name in level_names[g]:
                    free = self.free[name] - taken.get(name, ZERO)
                    if replica.fits_in(free):
                        pick = name
                        break
                if pick:
                    break
            if pick is None:
                return None
            chosen.append(pick)
            taken[pick] = taken.get(pick, ZERO) + replica
        return chosen

    def take(self, replica: Resources, nodes: Sequence[str]) -> None:
        """Hold one ``replica`` on each of ``nodes``."""
        for name in nodes:
            self._set(name, self.free[name] - replica)
            self.total_free = self.total_free - replica

    def give(self, placement: Iterable[tuple[str, Resources]]) -> None:
        """Free what a placement held."""
        for name, r in placement:
            if name not in self.free:
                continue  # a replica on a node outside this snapshot frees nothing here
            self._set(name, self.free[name] + r)
            self.total_free = self.total_free + r

    def copy(self) -> Cluster:
        """An independent copy (to try preemptions on)."""
        clone = Cluster(())
        clone.capacity, clone.total_free = self.capacity, self.total_free
        clone.free = dict(self.free)
        for g, names in self.by_gpu.items():
            clone.by_gpu[g] = set(names)
        return clone
