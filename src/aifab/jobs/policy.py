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
from functools import cached_property
from typing import Literal

from aifab.jobs.placement import Cluster, Node
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

    @cached_property
    def total(self) -> Resources:
        """Resources held by all replicas."""
        out = ZERO
        for _, r in self.placement:
            out = out + r
        return out


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


def _sum(amounts: Sequence[Resources]) -> Resources:
    """Like ``resources.total`` without a new object per addition (hot at cluster scale)."""
    return Resources(
        sum(r.cpu for r in amounts), sum(r.memory_mb for r in amounts), sum(r.gpu for r in amounts)
    )


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


def _no_room(job: JobRequest, cluster: Cluster) -> str:
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
    cluster = Cluster(nodes)
    decision = Decision()
    used: dict[str, Resources] = defaultdict(lambda: ZERO)
    by_queue_running: dict[str, list[Resources]] = defaultdict(list)
    for rj in running:
        by_queue_running[rj.queue].append(rj.total)
    for q, amounts in by_queue_running.items():
        used[q] = _sum(amounts)
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
    # A job failed to start, and nothing started since: a job of the same shape fails the same
    # way (the outcome depends only on queue, priority and size), so skip the search for it.
    failed: dict[tuple[object, ...], tuple[int, Resources, str, str]] = {}
    version = 0
    while heap:
        _, q = heapq.heappop(heap)
        jobs = by_queue[q]
        if cursor[q] >= len(jobs):
            continue
        job = jobs[cursor[q]]
        cursor[q] += 1
        shape = (job.queue, job.priority, job.replica, job.replicas, job.gang)
        seen = failed.get(shape)
        if seen is not None and seen[0] == version and seen[1] == reserved:
            started, decision.waiting[job.id] = seen[2], seen[3]
        else:
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
            if started == "started":
                version += 1
            else:
                if job.id not in decision.waiting:
                    decision.waiting[job.id] = _no_room(job, cluster)
                failed[shape] = (version, reserved, started, decision.waiting[job.id])
        # Only a job waiting for room reserves it: one held by its queue's capability would
        # hold every other queue back without ever getting closer to starting.
        if started == "blocked" and now - job.submitted_at >= starvation_s:
            reserved = reserved + job.demand
        if cursor[q] < len(jobs):
            heapq.heappush(heap, (used[q].dominant_share(cluster.capacity) / queues[q].weight, q))
    return decision


def _try_start(
    job: JobRequest,
    cluster: Cluster,
    queues: Mapping[str, QueuePolicy],
    used: dict[str, Resources],
    deserved: Mapping[str, Resources],
    running: Sequence[RunningJob],
    reserved: Resources,
    victims_taken: set[str],
    decision: Decision,
    preemption: bool,
) -> Literal["started", "capped", "blocked"]:
    pol = queues.get(job.queue)
    reason = _capability_reason(pol, used[job.queue], job)
    if reason:
        decision.waiting[job.id] = reason
        return "capped"
    if reserved != ZERO and not (job.demand + reserved).fits_in(cluster.total_free):
        decision.waiting[job.id] = "held back: free resources are reserved for a starving job"
        return "blocked"
    nodes = _place(job, cluster, pol, used[job.queue])
    victims: list[RunningJob] = []
    if nodes is None and preemption:
        victims, nodes = _find_victims(job, cluster, queues, used, deserved, running, victims_taken)
    if nodes is None:
        return "blocked"
    for v in victims:
        cluster.give(v.placement)
        used[v.queue] = used[v.queue] - v.total
        victims_taken.add(v.id)
        decision.preempted[v.id] = f"preempted by job {job.id} (priority {job.priority})"
    cluster.take(job.replica, nodes)
    used[job.queue] = used[job.queue] + job.replica.times(len(nodes))
    decision.starts.append(Start(job.id, tuple(nodes), tuple(v.id for v in victims)))
    return "started"


def _place(
    job: JobRequest, cluster: Cluster, pol: QueuePolicy | None, used: Resources
) -> list[str] | None:
    """All replicas if they fit (the queue's capability included), else the gang minimum."""
    full = job.replica.times(job.replicas)
    if job.gang == job.replicas or pol is None or pol.capability is None:
        grow = True
    else:
        grow = (used + full).fits_in(pol.capability)
    nodes = cluster.place(job.replica, job.replicas) if grow else None
    if nodes is None and job.gang < job.replicas:
        nodes = cluster.place(job.replica, job.gang)  # elastic: start with the minimum
    return nodes


def _find_victims(
    job: JobRequest,
    cluster: Cluster,
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
    if not candidates:
        return [], None
    releasable = _sum([cluster.total_free, *(rj.total for rj in candidates)])
    if not job.demand.fits_in(releasable):
        return [], None  # even preempting every candidate would not make room
    candidates.sort(key=lambda r: (r.priority, -r.started_at))
    trial = cluster.copy()
    chosen: list[RunningJob] = []
    for rj in candidates:
        trial.give(rj.placement)
        chosen.append(rj)
        nodes = trial.place(job.replica, job.gang)
        if nodes is not None:
            return _prune(job, cluster, chosen, nodes)
    return [], None


def _prune(
    job: JobRequest, cluster: Cluster, chosen: list[RunningJob], nodes: list[str]
) -> tuple[list[RunningJob], list[str]]:
    """Drop victims the job does not need (e.g. on a node it cannot use), most valued first."""
    keep = list(chosen)
    for rj in reversed(chosen[:-1]):
        rest = [v for v in keep if v is not rj]
        trial = cluster.copy()
        for v in rest:
            trial.give(v.placement)
        placed = trial.place(job.replica, job.gang)
        if placed is not None:
            keep, nodes = rest, placed
    return keep, nodes


def _fifo(
    cluster: Cluster,
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
        pol = queues.get(job.queue)
        if pol is None:
            decision.waiting[job.id] = f"queue {job.queue!r} does not exist"
            continue
        reason = _capability_reason(pol, used[job.queue], job)
        nodes = None if reason else _place(job, cluster, pol, used[job.queue])
        if nodes is None:
            decision.waiting[job.id] = reason or _no_room(job, cluster)
            blocker = job.id
            continue
        cluster.take(job.replica, nodes)
        used[job.queue] = used[job.queue] + job.replica.times(len(nodes))
        decision.starts.append(Start(job.id, tuple(nodes)))
