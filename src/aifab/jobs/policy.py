"""The scheduling policy, as pure functions over a snapshot of the cluster.

One call to :func:`schedule` decides which pending jobs start (and where), which running jobs are
preempted to make room, and why every other pending job waits. The real scheduler feeds it rows
from the metadata DB; ``bench/cluster_sim.py`` feeds it a simulated 1,000-node cluster. Same code.

Policy ``"aifab"`` (Volcano-like): queues take turns by weighted dominant-resource share (DRF);
inside a queue, higher priority first, then older; a gang starts only if ``min_available``
replicas fit at once; smaller jobs backfill around a blocked one unless it has starved; a job
that cannot fit may preempt lower-priority jobs of its queue, or reclaim from reclaimable queues
running above their deserved share. Policy ``"fifo"`` is the baseline: strict submission order.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from aifab.jobs.resources import ZERO, Resources

Policy = Literal["aifab", "fifo"]


@dataclass(frozen=True)
class QueuePolicy:
    """A queue's share rules (Volcano's Queue: weight, capability, reclaimable)."""

    name: str
    weight: float = 1.0
    capability: Resources | None = None
    reclaimable: bool = True


@dataclass(frozen=True)
class JobRequest:
    """A pending job: per-replica resources, gang size and ordering keys."""

    id: str
    queue: str
    priority: int
    submitted_at: float
    replica: Resources
    replicas: int = 1
    min_available: int | None = None

    @property
    def gang(self) -> int:
        """Replicas that must start together."""
        return self.min_available or self.replicas

    @property
    def demand(self) -> Resources:
        """Resources of the gang."""
        return self.replica.times(self.gang)


@dataclass(frozen=True)
class RunningJob:
    """A running job and where its replicas are."""

    id: str
    queue: str
    priority: int
    started_at: float
    placement: tuple[tuple[str, Resources], ...]
    preemptible: bool = True

    @property
    def total(self) -> Resources:
        """Resources held by all replicas."""
        out = ZERO
        for _, r in self.placement:
            out = out + r
        return out


@dataclass(frozen=True)
class Node:
    """A machine: its capacity and what is in use."""

    name: str
    capacity: Resources
    used: Resources = ZERO


@dataclass(frozen=True)
class Start:
    """Start ``job_id`` with one replica on each listed node, after stopping ``preempt``."""

    job_id: str
    nodes: tuple[str, ...]
    preempt: tuple[str, ...] = ()


@dataclass
class Decision:
    """The outcome of one scheduling cycle."""

    starts: list[Start] = field(default_factory=list)
    preempted: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)


class _Cluster:
    """Free resources per node, indexed by free GPUs so gang placement stays fast at scale."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.free: dict[str, Resources] = {}
        self.by_gpu: dict[int, set[str]] = defaultdict(set)
        self.capacity = ZERO
        for n in nodes:
            self.capacity = self.capacity + n.capacity
            self._set(n.name, n.capacity - n.used)
        self.total_free = ZERO
        for f in self.free.values():
            self.total_free = self.total_free + f

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
        for _ in range(count):
            pick = None
            for g in gpu_levels:
                for name in sorted(self.by_gpu[g]):
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
        for name in nodes:
            self._set(name, self.free[name] - replica)
            self.total_free = self.total_free - replica

    def give(self, placement: Iterable[tuple[str, Resources]]) -> None:
        for name, r in placement:
            if name not in self.free:
                continue  # a replica on a node outside this snapshot frees nothing here
            self._set(name, self.free[name] + r)
            self.total_free = self.total_free + r

    def copy(self) -> _Cluster:
        clone = _Cluster(())
        clone.capacity, clone.total_free = self.capacity, self.total_free
        for name, f in self.free.items():
            clone._set(name, f)
        return clone


def deserved_shares(
    capacity: Resources, queues: Mapping[str, QueuePolicy], demand: Mapping[str, Resources]
) -> dict[str, Resources]:
    """Water-fill each resource across queues by weight, capped by demand and capability."""
    out: dict[str, dict[str, float]] = {q: {} for q in queues}
    for dim in ("cpu", "memory_mb", "gpu"):
        want = {}
        for q, pol in queues.items():
            cap = getattr(pol.capability, dim) if pol.capability else float("inf")
            want[q] = min(float(getattr(demand.get(q, ZERO), dim)), cap)
        got = dict.fromkeys(queues, 0.0)
        remaining = float(getattr(capacity, dim))
        active = {q for q in queues if want[q] > 0}
        while remaining > 1e-9 and active:
            wsum = sum(queues[q].weight for q in active)
            spent = 0.0
            for q in sorted(active):
                give = min(remaining * queues[q].weight / wsum, want[q] - got[q])
                got[q] += give
                spent += give
            active = {q for q in active if want[q] - got[q] > 1e-9}
            remaining -= spent
            if spent <= 1e-9:
                break
        for q in queues:
            out[q][dim] = got[q]
    return {q: Resources(v["cpu"], v["memory_mb"], int(v["gpu"])) for q, v in out.items()}


def _order(jobs: Iterable[JobRequest]) -> list[JobRequest]:
    return sorted(jobs, key=lambda j: (-j.priority, j.submitted_at, j.id))


def _capability_reason(pol: QueuePolicy | None, used: Resources, job: JobRequest) -> str | None:
    if pol is None or pol.capability is None:
        return None
    need = used + job.demand
    if need.fits_in(pol.capability):
        return None
    return (
        f"queue {pol.name!r} capability reached: in use + job > capability "
        f"({need.shortfall(pol.capability)})"
    )


def _no_room(job: JobRequest, cluster: _Cluster) -> str:
    r = job.replica
    return (
        f"waiting for resources: {job.gang} replica(s) of cpu {r.cpu:g}, memory "
        f"{r.memory_mb:g} MiB, gpu {r.gpu} do not fit (free in total: cpu "
        f"{cluster.total_free.cpu:g}, memory {cluster.total_free.memory_mb:g} MiB, gpu "
        f"{cluster.total_free.gpu})"
    )


def schedule(
    nodes: Sequence[Node],
    queues: Mapping[str, QueuePolicy],
    pending: Sequence[JobRequest],
    running: Sequence[RunningJob],
    *,
    now: float,
    policy: Policy = "aifab",
    starvation_s: float = 600.0,
    preemption: bool = True,
) -> Decision:
    """Decide one scheduling cycle.

    Args:
        nodes: machines with capacity and current use (running jobs' use included).
        queues: queue rules by name; jobs of unknown queues wait with a reason.
        pending: jobs waiting to start.
        running: jobs holding resources (candidates for preemption).
        now: the current time, for starvation.
        policy: ``"aifab"`` (DRF, priorities, gangs, backfill, preemption) or ``"fifo"``.
        starvation_s: after this long blocked, a job reserves room instead of being backfilled.
        preemption: allow preemption and reclaim (``"aifab"`` only).
    """
    cluster = _Cluster(nodes)
    decision = Decision()
    used: dict[str, Resources] = defaultdict(lambda: ZERO)
    for rj in running:
        used[rj.queue] = used[rj.queue] + rj.total
    if policy == "fifo":
        _fifo(cluster, queues, pending, used, decision)
        return decision
    demand = dict(used)
    for j in pending:
        demand[j.queue] = demand.get(j.queue, ZERO) + j.demand
    deserved = deserved_shares(cluster.capacity, queues, demand)
    by_queue: dict[str, list[JobRequest]] = defaultdict(list)
    for j in _order(pending):
        if j.queue not in queues:
            decision.waiting[j.id] = f"queue {j.queue!r} does not exist"
        else:
            by_queue[j.queue].append(j)
    heap = [(used[q].dominant_share(cluster.capacity) / queues[q].weight, q) for q in by_queue]
    heapq.heapify(heap)
    cursor = dict.fromkeys(by_queue, 0)
    reserved = ZERO
    victims_taken: set[str] = set()
    while heap:
        _, q = heapq.heappop(heap)
        jobs = by_queue[q]
        if cursor[q] >= len(jobs):
            continue
        job = jobs[cursor[q]]
        cursor[q] += 1
        started = _try_start(
            job,
            cluster,
            queues,
            used,
            deserved,
            running,
            reserved,
            victims_taken,
            decision,
            preemption,
        )
        if not started and job.id not in decision.waiting:
            decision.waiting[job.id] = _no_room(job, cluster)
        if not started and now - job.submitted_at >= starvation_s:
            reserved = reserved + job.demand
        if cursor[q] < len(jobs):
            heapq.heappush(heap, (used[q].dominant_share(cluster.capacity) / queues[q].weight, q))
    return decision


def _try_start(
    job: JobRequest,
    cluster: _Cluster,
    queues: Mapping[str, QueuePolicy],
    used: dict[str, Resources],
    deserved: Mapping[str, Resources],
    running: Sequence[RunningJob],
    reserved: Resources,
    victims_taken: set[str],
    decision: Decision,
    preemption: bool,
) -> bool:
    reason = _capability_reason(queues.get(job.queue), used[job.queue], job)
    if reason:
        decision.waiting[job.id] = reason
        return False
    if reserved != ZERO and not (job.demand + reserved).fits_in(cluster.total_free):
        decision.waiting[job.id] = "held back: free resources are reserved for a starving job"
        return False
    nodes = cluster.place(job.replica, job.replicas)
    if nodes is None and job.gang < job.replicas:
        nodes = cluster.place(job.replica, job.gang)  # elastic: start with the minimum
    victims: list[RunningJob] = []
    if nodes is None and preemption:
        victims, nodes = _find_victims(job, cluster, queues, used, deserved, running, victims_taken)
    if nodes is None:
        return False
    for v in victims:
        cluster.give(v.placement)
        used[v.queue] = used[v.queue] - v.total
        victims_taken.add(v.id)
        decision.preempted[v.id] = f"preempted by job {job.id} (priority {job.priority})"
    cluster.take(job.replica, nodes)
    used[job.queue] = used[job.queue] + job.replica.times(len(nodes))
    decision.starts.append(Start(job.id, tuple(nodes), tuple(v.id for v in victims)))
    return True


def _find_victims(
    job: JobRequest,
    cluster: _Cluster,
    queues: Mapping[str, QueuePolicy],
    used: Mapping[str, Resources],
    deserved: Mapping[str, Resources],
    running: Sequence[RunningJob],
    taken: set[str],
) -> tuple[list[RunningJob], list[str] | None]:
    """Lowest-priority, newest victims whose removal lets ``job`` fit (or none)."""
    cap = cluster.capacity
    under_share = (used[job.queue] + job.demand).dominant_share(cap) <= deserved[
        job.queue
    ].dominant_share(cap) + 1e-9
    candidates = []
    for rj in running:
        if rj.id in taken or not rj.preemptible:
            continue
        same_queue = rj.queue == job.queue and rj.priority < job.priority
        pol = queues.get(rj.queue)
        reclaim = (
            rj.queue != job.queue
            and under_share
            and pol is not None
            and pol.reclaimable
            and used[rj.queue].dominant_share(cap)
            > deserved.get(rj.queue, ZERO).dominant_share(cap) + 1e-9
        )
        if same_queue or reclaim:
            candidates.append(rj)
    candidates.sort(key=lambda r: (r.priority, -r.started_at))
    trial = cluster.copy()
    chosen: list[RunningJob] = []
    for rj in candidates:
        trial.give(rj.placement)
        chosen.append(rj)
        nodes = trial.place(job.replica, job.gang)
        if nodes is not None:
            return chosen, nodes
    return [], None


def _fifo(
    cluster: _Cluster,
    queues: Mapping[str, QueuePolicy],
    pending: Sequence[JobRequest],
    used: dict[str, Resources],
    decision: Decision,
) -> None:
    """Strict submission order: the first job that cannot start blocks everything after it."""
    blocker: str | None = None
    for job in sorted(pending, key=lambda j: (j.submitted_at, j.id)):
        if blocker is not None:
            decision.waiting[job.id] = f"waiting behind earlier job {blocker} (fifo)"
            continue
        reason = _capability_reason(queues.get(job.queue), used[job.queue], job)
        nodes = None if reason else cluster.place(job.replica, job.gang)
        if nodes is None:
            decision.waiting[job.id] = reason or _no_room(job, cluster)
            blocker = job.id
            continue
        cluster.take(job.replica, nodes)
        used[job.queue] = used[job.queue] + job.demand
        decision.starts.append(Start(job.id, tuple(nodes)))
