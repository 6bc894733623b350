"""Replay a synthetic trace on a simulated GPU cluster, scheduled by aifab's own policy code.

A discrete-event simulation: jobs arrive (Poisson), wait, run and finish on N nodes x 8 GPUs;
at every batch of same-time events it calls :func:`aifab.jobs.policy.schedule`, the function the
real worker calls, and applies the decision (preempted jobs go back to pending and lose their
progress since their last checkpoint). Compares policy ``fifo`` with ``aifab`` on GPU
utilisation, wait times, per-queue GPU-hours vs weights (Jain's fairness index), preemptions
and simulation wall time. Simplifications: a preempted job stops at once (the real worker waits
for it to exit); each cycle passes at most ``--window`` pending jobs to the policy (``aifab``:
the first window/queues of each queue by priority then age; ``fifo``: the oldest).

    python bench/cluster_sim.py --jobs 5000 --nodes 1000 --seed 0
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import math
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from aifab.jobs.policy import JobRequest, Node, Policy, QueuePolicy, RunningJob, schedule
from aifab.jobs.resources import Resources

NODE = Resources(cpu=96, memory_mb=1024 * 1024, gpu=8)
CPU_PER_GPU, MEM_PER_GPU_MB = 8.0, 64 * 1024.0
#: (total GPUs, probability): 1-8 GPUs run as one replica, bigger jobs as gangs of 8-GPU replicas.
SIZES = ((1, 0.40), (2, 0.15), (4, 0.15), (8, 0.15), (16, 0.07), (32, 0.05), (64, 0.03))
PRIORITIES = ((0, 0.75), (1, 0.20), (2, 0.05))


@dataclass(frozen=True)
class QueueMix:
    """A simulated queue: its policy and the fraction of arrivals it receives."""

    policy: QueuePolicy
    arrivals: float


QUEUES = (
    QueueMix(QueuePolicy("prod", weight=4.0, reclaimable=False), 0.30),
    QueueMix(QueuePolicy("research", weight=2.0), 0.35),
    QueueMix(QueuePolicy("dev", weight=1.0), 0.20),
    QueueMix(QueuePolicy("batch", weight=1.0), 0.15),
)


@dataclass(frozen=True)
class SimJob:
    """One job of the trace."""

    id: str
    queue: str
    priority: int
    submit: float
    replica: Resources
    replicas: int
    duration: float
    preemptible: bool = True

    @property
    def gpus(self) -> int:
        """GPUs held while it runs."""
        return self.replica.gpu * self.replicas


def _pick(rng: random.Random, table: Sequence[tuple[Any, float]]) -> Any:
    return rng.choices([v for v, _ in table], weights=[w for _, w in table])[0]


def measure_window(trace: Sequence[SimJob], warmup_s: float | None = None) -> tuple[float, float]:
    """Where utilisation and shares are measured: once the empty cluster has filled (by default
    one mean job duration after the first arrival) until the last arrival."""
    if warmup_s is None:
        warmup_s = sum(j.duration for j in trace) / len(trace)
    first, last = min(j.submit for j in trace), max(j.submit for j in trace)
    return min(first + warmup_s, last), last


def window_demand(trace: Sequence[SimJob], window: tuple[float, float]) -> dict[str, float]:
    """GPU-seconds each queue would use inside ``window`` if every job started on arrival."""
    lo, hi = window
    out: dict[str, float] = defaultdict(float)
    for j in trace:
        overlap = min(j.submit + j.duration, hi) - max(j.submit, lo)
        if overlap > 0:
            out[j.queue] += overlap * j.gpus
    return out


def offered_load(trace: Sequence[SimJob], nodes: int, window: tuple[float, float]) -> float:
    """In-window demand over in-window capacity (1.0: exactly enough GPUs, without packing)."""
    span = window[1] - window[0]
    if span <= 0:
        return math.inf  # every job arrives before the cluster could fill: unbounded overload
    return sum(window_demand(trace, window).values()) / (nodes * NODE.gpu * span)


def make_trace(
    n: int, nodes: int, *, load: float = 1.0, seed: int = 0, median_s: float = 2700.0
) -> list[SimJob]:
    """``n`` jobs with Poisson arrivals timed so the measured window is offered ``load``."""
    rng = random.Random(seed)
    shapes, gaps = [], []
    for _ in range(n):
        gpus = _pick(rng, SIZES)
        per = min(gpus, 8)
        replica = Resources(CPU_PER_GPU * per, MEM_PER_GPU_MB * per, per)
        duration = min(max(rng.lognormvariate(math.log(median_s), 1.0), 60.0), 3 * 86400.0)
        queue = _pick(rng, [(q.policy.name, q.arrivals) for q in QUEUES])
        shapes.append((replica, gpus // per, duration, queue, _pick(rng, PRIORITIES)))
        gaps.append(rng.expovariate(1.0))
    flags = [rng.random() >= 0.1 for _ in range(n)]  # 10% of jobs are not preemptible

    def build(scale: float) -> list[SimJob]:
        t, jobs = 0.0, []
        for i, (replica, k, duration, queue, prio) in enumerate(shapes):
            t += gaps[i] * scale
            jobs.append(SimJob(f"j{i:06d}", queue, prio, t, replica, k, duration, flags[i]))
        return jobs

    # Heavy-tailed durations spill past the last arrival, so solve for the arrival spacing
    # that offers ``load`` inside the measured window (the offered load falls as spacing grows).
    lo, hi = 1e-3, 1e7
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        trace = build(mid)
        if offered_load(trace, nodes, measure_window(trace)) > load:
            lo = mid
        else:
            hi = mid
    return build(hi)


@dataclass
class _Run:
    since: float
    done_before: float  # checkpointed progress when this attempt started
    token: int


@dataclass
class SimResult:
    """What one policy did with the trace."""

    policy: str
    utilisation: float
    wait_mean_s: float
    wait_p99_s: float
    gpu_hours: dict[str, float]
    preemptions: int
    wasted_gpu_hours: float
    makespan_h: float
    cycles: int
    wall_s: float
    window: tuple[float, float]
    capacity_gpus: int
    waits: list[float] = field(repr=False, default_factory=list)


class Simulator:
    """The cluster, the queues and the event loop for one policy."""

    def __init__(
        self,
        trace: Sequence[SimJob],
        nodes: int,
        policy: Policy,
        *,
        checkpoint_s: float = 1800.0,
        window: int = 256,
        starvation_s: float = 600.0,
        warmup_s: float | None = None,
        check: bool = False,
    ) -> None:
        self.trace = sorted(trace, key=lambda j: (j.submit, j.id))
        self.jobs = {j.id: j for j in self.trace}
        self.policy, self.checkpoint_s, self.window = policy, checkpoint_s, window
        self.starvation_s, self.check = starvation_s, check
        self.measured = measure_window(self.trace, warmup_s)
        self.queues = {q.policy.name: q.policy for q in QUEUES}
        self.nodes = {f"n{i:04d}": Node(f"n{i:04d}", NODE) for i in range(nodes)}
        self.total_gpus = nodes * NODE.gpu
        self.pending: dict[str, list[tuple[int, float, str]]] = defaultdict(list)
        self.running: dict[str, RunningJob] = {}
        self.runs: dict[str, _Run] = {}
        self.progress: dict[str, float] = defaultdict(float)
        self.wait_from: dict[str, float] = {}
        self.waited: dict[str, float] = defaultdict(float)
        self.ends: list[tuple[float, int, str]] = []
        self.seq = self.preemptions = self.cycles = 0
        self.gpu_s: dict[str, float] = defaultdict(float)  # during the measured window
        self.gpus_in_use: dict[str, int] = defaultdict(int)
        self.wasted_gpu_s = 0.0
        self.now = 0.0

    # --- state changes -------------------------------------------------------------------

    def _key(self, job: SimJob) -> tuple[int, float, str]:
        return (-job.priority, job.submit, job.id)

    def _enqueue(self, job: SimJob, t: float) -> None:
        bisect.insort(self.pending[job.queue], self._key(job))
        self.wait_from[job.id] = t

    def _occupy(self, name: str, amount: Resources) -> None:
        node = self.nodes[name]
        self.nodes[name] = replace(node, used=node.used + amount)

    def _start(self, job: SimJob, nodes: tuple[str, ...], t: float) -> None:
        entries = self.pending[job.queue]
        del entries[bisect.bisect_left(entries, self._key(job))]
        self.waited[job.id] += t - self.wait_from.pop(job.id)
        for name in nodes:
            self._occupy(name, job.replica)
        placement = tuple((n, job.replica) for n in nodes)
        self.running[job.id] = RunningJob(
            job.id, job.queue, job.priority, t, placement, job.preemptible
        )
        self.gpus_in_use[job.queue] += job.gpus
        self.seq += 1
        self.runs[job.id] = _Run(t, self.progress[job.id], self.seq)
        end = t + job.duration - self.progress[job.id]
        heapq.heappush(self.ends, (end, self.seq, job.id))

    def _stop(self, job_id: str, t: float) -> None:
        rj = self.running.pop(job_id)
        for name, r in rj.placement:
            self._occupy(name, Resources() - r)
        self.gpus_in_use[rj.queue] -= self.jobs[job_id].gpus
        del self.runs[job_id]

    def _preempt(self, job_id: str, t: float) -> None:
        job, run = self.jobs[job_id], self.runs[job_id]
        ran = t - run.since
        kept = math.floor(ran / self.checkpoint_s) * self.checkpoint_s if self.checkpoint_s else 0
        self.progress[job_id] = run.done_before + kept
        self.wasted_gpu_s += (ran - kept) * job.gpus
        self.preemptions += 1
        self._stop(job_id, t)
        self._enqueue(job, t)

    # --- the loop ------------------------------------------------------------------------

    def _window(self) -> list[JobRequest]:
        if self.policy == "fifo":
            entries = heapq.nsmallest(
                self.window,
                (e for q in self.pending.values() for e in q),
                key=lambda e: (e[1], e[2]),
            )
        else:
            per_queue = max(1, self.window // len(self.queues))
            entries = [e for q in self.pending.values() for e in q[:per_queue]]
        out = []
        for _, _, jid in entries:
            j = self.jobs[jid]
            out.append(JobRequest(j.id, j.queue, j.priority, j.submit, j.replica, j.replicas))
        return out

    def _cycle(self, t: float) -> None:
        pending = self._window()
        if not pending:
            return
        self.cycles += 1
        decision = schedule(
            list(self.nodes.values()),
            self.queues,
            pending,
            list(self.running.values()),
            now=t,
            policy=self.policy,
            starvation_s=self.starvation_s,
        )
        for victim in decision.preempted:
            self._preempt(victim, t)
        for st in decision.starts:
            self._start(self.jobs[st.job_id], st.nodes, t)
        if self.check:
            self._check()

    def _check(self) -> None:
        for node in self.nodes.values():
            assert node.used.fits_in(node.capacity), node
            assert node.used.gpu >= 0 and node.used.cpu >= -1e-6, node

    def _advance(self, t: float, window: tuple[float, float]) -> None:
        """Account GPU-seconds per queue from ``self.now`` to ``t`` (inside ``window`` only)."""
        lo, hi = window
        span = min(max(t, lo), hi) - min(max(self.now, lo), hi)
        if span > 0:
            for q, gpus in self.gpus_in_use.items():
                self.gpu_s[q] += span * gpus
        self.now = t

    def run(self) -> SimResult:
        """Replay the whole trace until every job has finished."""
        wall = time.perf_counter()
        arrivals, i = self.trace, 0
        while i < len(arrivals) or self.ends:
            t = min(
                arrivals[i].submit if i < len(arrivals) else math.inf,
                self.ends[0][0] if self.ends else math.inf,
            )
            self._advance(t, self.measured)
            while self.ends and self.ends[0][0] <= t:
                _, token, jid = heapq.heappop(self.ends)
                run = self.runs.get(jid)
                if run is not None and run.token == token:  # else it was preempted meanwhile
                    self._stop(jid, t)
            while i < len(arrivals) and arrivals[i].submit <= t:
                self._enqueue(arrivals[i], t)
                i += 1
            self._cycle(t)
        return self._result(time.perf_counter() - wall)

    def _result(self, wall_s: float) -> SimResult:
        waits = [self.waited[j.id] for j in self.trace]
        span = self.measured[1] - self.measured[0]
        used = sum(self.gpu_s.values())
        return SimResult(
            policy=self.policy,
            utilisation=used / (self.total_gpus * span) if span > 0 else 0.0,
            wait_mean_s=sum(waits) / len(waits),
            wait_p99_s=sorted(waits)[min(len(waits) - 1, int(0.99 * len(waits)))],
            gpu_hours={q: self.gpu_s[q] / 3600 for q in self.queues},
            preemptions=self.preemptions,
            wasted_gpu_hours=self.wasted_gpu_s / 3600,
            makespan_h=self.now / 3600,
            cycles=self.cycles,
            wall_s=wall_s,
            window=self.measured,
            capacity_gpus=self.total_gpus,
            waits=waits,
        )


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all values are equal, 1/n when one takes everything."""
    total, squares = sum(values), sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares else 1.0


def fair_shares(weights: dict[str, float], demand: dict[str, float], supply: float) -> dict:
    """Weighted max-min shares of ``supply``: queues get weight-proportional parts, capped by
    demand, the rest re-divided (what DRF aims for on one resource)."""
    got = dict.fromkeys(weights, 0.0)
    active = {q for q in weights if demand.get(q, 0) > 0}
    left = supply
    while left > 1e-9 and active:
        wsum = sum(weights[q] for q in active)
        for q in sorted(active):
            got[q] += min(left * weights[q] / wsum, demand[q] - got[q])
        left = supply - sum(got.values())
        active = {q for q in active if demand[q] - got[q] > 1e-9}
    return got


def fairness(result: SimResult, trace: Sequence[SimJob]) -> tuple[dict[str, dict], float]:
    """Per queue: share of the GPU-hours delivered, weight share and weighted max-min fair share
    of the in-window capacity given each queue's demand; Jain's index of delivered / fair."""
    weights = {q.policy.name: q.policy.weight for q in QUEUES}
    demand = {q: s / 3600 for q, s in window_demand(trace, result.window).items()}
    supply = result.capacity_gpus * (result.window[1] - result.window[0]) / 3600
    fair = fair_shares(weights, demand, supply)
    delivered = sum(result.gpu_hours.values())
    rows = {
        q: {
            "gpu_hours": result.gpu_hours[q],
            "fair_gpu_hours": fair[q],
            "share": result.gpu_hours[q] / delivered if delivered else 0.0,
            "weight_share": w / sum(weights.values()),
            "fair_share": fair[q] / sum(fair.values()) if any(fair.values()) else 0.0,
        }
        for q, w in weights.items()
    }
    ratios = [r["gpu_hours"] / r["fair_gpu_hours"] for r in rows.values() if r["fair_gpu_hours"]]
    return rows, jain(ratios)


def report(results: Sequence[SimResult], trace: Sequence[SimJob], nodes: int) -> None:
    """Print the two policies side by side, then the per-queue shares."""
    fair = {r.policy: fairness(r, trace) for r in results}
    window = results[0].window
    print(
        f"\n{len(trace)} jobs on {nodes} nodes x {NODE.gpu} GPUs; offered load "
        f"{offered_load(trace, nodes, window):.0%} in the measured window "
        f"({window[0] / 3600:.1f} h to {window[1] / 3600:.1f} h: from one mean job duration after "
        "the first arrival to the last arrival)\n"
    )
    print(f"{'metric':<26}" + "".join(f"{r.policy:>14}" for r in results))
    rows = [
        ("GPU utilisation", lambda r: f"{r.utilisation:.1%}"),
        ("wait mean (min)", lambda r: f"{r.wait_mean_s / 60:.1f}"),
        ("wait p99 (min)", lambda r: f"{r.wait_p99_s / 60:.1f}"),
        ("Jain's index (share/fair)", lambda r: f"{fair[r.policy][1]:.3f}"),
        ("preemptions", lambda r: f"{r.preemptions}"),
        ("GPU-hours lost to preempt", lambda r: f"{r.wasted_gpu_hours:.0f}"),
        ("makespan (h)", lambda r: f"{r.makespan_h:.1f}"),
        ("schedule() calls", lambda r: f"{r.cycles}"),
        ("simulation wall (s)", lambda r: f"{r.wall_s:.1f}"),
    ]
    for name, fmt in rows:
        print(f"{name:<26}" + "".join(f"{fmt(r):>14}" for r in results))
    print("\nshare of delivered GPU-hours (weight share | weighted max-min fair share)")
    for q in (m.policy.name for m in QUEUES):
        first = fair[results[0].policy][0][q]
        cells = "".join(f"{fair[r.policy][0][q]['share']:>14.1%}" for r in results)
        print(f"  {q:<10}{cells}   ({first['weight_share']:.1%} | {first['fair_share']:.1%})")
    print("\nwait, mean / p99 (min)")
    groups = [(f"{g} GPUs", lambda j, g=g: j.gpus == g) for g, _ in SIZES]
    groups += [(m.policy.name, lambda j, q=m.policy.name: j.queue == q) for m in QUEUES]
    groups += [(f"priority {p}", lambda j, p=p: j.priority == p) for p, _ in PRIORITIES]
    for label, member in groups:
        idx = [i for i, j in enumerate(trace) if member(j)]
        cells = "".join(f"{_mean_p99([r.waits[i] for i in idx]):>14}" for r in results)
        print(f"  {label:<11}({len(idx):>4}){cells}")


def _mean_p99(waits: list[float]) -> str:
    if not waits:
        return "-"
    p99 = sorted(waits)[min(len(waits) - 1, int(0.99 * len(waits)))]
    return f"{sum(waits) / len(waits) / 60:.1f} / {p99 / 60:.0f}"


def main() -> None:
    """Generate one trace and replay it under each policy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--load", type=float, default=1.0, help="Offered GPU load in the window.")
    parser.add_argument("--checkpoint-s", type=float, default=1800.0)
    parser.add_argument("--window", type=int, default=256, help="Pending jobs per cycle.")
    parser.add_argument("--starvation-s", type=float, default=600.0)
    parser.add_argument("--policies", default="fifo,aifab")
    args = parser.parse_args()
    trace = make_trace(args.jobs, args.nodes, load=args.load, seed=args.seed)
    results = []
    for policy in args.policies.split(","):
        sim = Simulator(
            trace,
            args.nodes,
            "fifo" if policy == "fifo" else "aifab",
            checkpoint_s=args.checkpoint_s,
            window=args.window,
            starvation_s=args.starvation_s,
        )
        results.append(sim.run())
        print(f"{policy}: done in {results[-1].wall_s:.1f} s", flush=True)
    report(results, trace, args.nodes)


if __name__ == "__main__":
    main()
