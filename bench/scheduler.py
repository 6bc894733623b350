"""Scheduling overhead: aifab's worker (local executor) vs Ray tasks, N no-op jobs on one machine.

aifab: one in-process :class:`~aifab.jobs.worker.Worker` (in a thread, as ``aifab serve`` runs
it) schedules N jobs running ``true`` while the main thread submits them through the service
API. Reported: scheduling decisions per second (jobs started / time spent in
``scheduler.plan``), per-cycle ``plan`` latency, submit-to-start latency (``JobRow.submitted_at``
to the first ``AttemptRow.started_at``) and end-to-end throughput. Ray: N no-op tasks with the
same CPU request on ``ray.init(num_cpus=<cores>)``; the task reads ``time.time()`` when it
starts. Note the work differs in kind: each aifab job is a new process (fork + exec) with a
durable DB record, audit event and log file; a Ray task reuses a pooled worker process and keeps
its state in memory. Both start with warm-up jobs that are not measured.

    python bench/scheduler.py --jobs 2000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def pct(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def _spec(i: int, cpu: float) -> dict[str, Any]:
    return {
        "name": f"noop-{i}",
        "run": {"command": ["true"]},
        "resources": {"cpu": cpu, "memory": "16Mi"},
    }


def _wait_final(n: int, timeout_s: float) -> None:
    from sqlalchemy import func, select

    from aifab.core.db import session_scope
    from aifab.jobs.tables import JobRow

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        with session_scope() as s:
            done = s.scalar(
                select(func.count()).where(JobRow.state.in_(("succeeded", "failed", "cancelled")))
            )
        if done and done >= n:
            return
        time.sleep(0.2)
    raise TimeoutError(f"aifab: jobs not final after {timeout_s:.0f} s")


def _latencies(since: float) -> tuple[list[float], float, float, int]:
    """Submit-to-start latencies of jobs submitted after ``since``, first submit, last finish."""
    from sqlalchemy import func, select

    from aifab.core.db import session_scope
    from aifab.jobs.tables import AttemptRow, JobRow

    with session_scope() as s:
        rows = s.execute(
            select(JobRow.submitted_at, func.min(AttemptRow.started_at), JobRow.finished_at)
            .join(AttemptRow, AttemptRow.job_id == JobRow.id)
            .where(JobRow.submitted_at >= since)
            .group_by(JobRow.id)
        ).all()
        failed = s.scalar(select(func.count()).where(JobRow.state != "succeeded")) or 0
    lat = [started - submitted for submitted, started, _ in rows]
    last = max(r[2] or r[1] for r in rows)  # every job is final here: finished_at is set
    return lat, min(r[0] for r in rows), last, int(failed)


def run_aifab(n: int, cpu: float, poll_s: float, warmup: int) -> dict[str, Any]:
    """Submit ``n`` no-op jobs while one in-process worker runs them; measure the scheduler."""
    from aifab.jobs import scheduler, service
    from aifab.jobs.worker import Worker, WorkerOptions

    plan_s: list[float] = []
    plan_started: list[int] = []
    plan = scheduler.plan

    def timed_plan(*args: Any, **kwargs: Any) -> list[scheduler.Claim]:
        t0 = time.perf_counter()
        claims = plan(*args, **kwargs)
        plan_s.append(time.perf_counter() - t0)
        plan_started.append(len(claims))
        return claims

    scheduler.plan = timed_plan  # instrument: same behaviour, timed
    worker = Worker(WorkerOptions(executor="local", lease_s=60, poll_s=poll_s))
    stop = threading.Event()
    # The loop runs in a thread that outlives every replica (they die with their parent thread).
    thread = threading.Thread(target=worker.run, args=(stop,), name="aifab-worker")
    thread.start()
    try:
        for i in range(warmup):
            service.submit(_spec(i, cpu))
        _wait_final(warmup, 120)
        plan_s.clear()
        plan_started.clear()
        t0 = time.time()
        for i in range(n):
            service.submit(_spec(warmup + i, cpu))
        submit_s = time.time() - t0
        _wait_final(warmup + n, 1800)
    finally:
        stop.set()
        thread.join()
        scheduler.plan = plan
    lat, first, last, failed = _latencies(t0)
    busy = [t for t, k in zip(plan_s, plan_started, strict=True) if k]
    return {
        "jobs": n,
        "failed": failed,
        "submit_per_s": n / submit_s,
        "decisions_per_s": sum(plan_started) / sum(plan_s),
        "plan_cycles": len(plan_s),
        "plan_ms_p50": 1000 * pct(busy, 50),
        "plan_ms_p99": 1000 * pct(busy, 99),
        "start_latency_s_p50": pct(lat, 50),
        "start_latency_s_p99": pct(lat, 99),
        "throughput_per_s": n / (last - first),
    }


def run_ray(n: int, cpu: float, cores: int, warmup: int) -> dict[str, Any]:
    """Run ``n`` no-op Ray tasks requesting ``cpu`` each on a local Ray of ``cores`` CPUs."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False)
    try:

        @ray.remote(num_cpus=cpu)
        def noop() -> float:
            return time.time()

        ray.get([noop.remote() for _ in range(max(warmup, cores))])
        submitted: list[float] = []
        refs = []
        t0 = time.time()
        for _ in range(n):
            submitted.append(time.time())
            refs.append(noop.remote())
        submit_s = time.time() - t0
        started = ray.get(refs)
        end = time.time()
    finally:
        ray.shutdown()
    lat = [b - a for a, b in zip(submitted, started, strict=True)]
    return {
        "jobs": n,
        "submit_per_s": n / submit_s,
        "start_latency_s_p50": pct(lat, 50),
        "start_latency_s_p99": pct(lat, 99),
        "throughput_per_s": n / (end - t0),
    }


def report(aifab: dict[str, Any], ray: dict[str, Any]) -> None:
    """Print both figures and the ratio, one line per metric."""
    print(f"\n{'metric':<24}{'aifab':>14}{'ray':>14}{'aifab/ray':>12}")
    for key in ("submit_per_s", "start_latency_s_p50", "start_latency_s_p99", "throughput_per_s"):
        a, r = aifab[key], ray[key]
        print(f"{key:<24}{a:>14.4g}{r:>14.4g}{a / r if r else float('nan'):>12.3g}")
    print(
        f"aifab scheduler: {aifab['decisions_per_s']:.0f} decisions/s over "
        f"{aifab['plan_cycles']} plan() cycles; plan() p50 {aifab['plan_ms_p50']:.1f} ms, "
        f"p99 {aifab['plan_ms_p99']:.1f} ms (cycles that started jobs); failed jobs: "
        f"{aifab['failed']}"
    )


def main() -> None:
    """Run aifab then Ray in the same process on the same machine; print both and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000, help="No-op jobs per system.")
    parser.add_argument("--cpu", type=float, default=0.1, help="CPU request per job/task.")
    parser.add_argument("--poll", type=float, default=0.01, help="Worker idle poll (s).")
    parser.add_argument("--warmup", type=int, default=20, help="Unmeasured jobs first.")
    parser.add_argument("--skip-ray", action="store_true", help="Only run aifab.")
    parser.add_argument("--json", type=Path, help="Also write the figures to this file.")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="aifab-bench-sched-"))
    os.environ["AIFAB_HOME"] = str(home)
    os.environ.pop("AIFAB_DB_URL", None)
    cores = len(os.sched_getaffinity(0))
    try:
        aifab = run_aifab(args.jobs, args.cpu, args.poll, args.warmup)
        print("aifab:", json.dumps(aifab))
        ray = {} if args.skip_ray else run_ray(args.jobs, args.cpu, cores, args.warmup)
        if ray:
            print("ray:", json.dumps(ray))
            report(aifab, ray)
        if args.json:
            args.json.write_text(json.dumps({"aifab": aifab, "ray": ray, "cores": cores}))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(f"(machine: {cores} cores; per-job CPU request {args.cpu}; one run, after warm-up)")


if __name__ == "__main__":
    main()
