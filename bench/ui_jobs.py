"""The jobs pages' server time with a big job history, beside the service calls they make.

Seeds a fresh workspace with ``--jobs`` jobs (default 10,000: most finished with an attempt
each on one of 8 workers, 2,000 pending, 50 running), then times in one run: the service calls
behind ``/ui/jobs`` (``list_jobs``, ``queue_usage``, ``attempt_timeline``) as the baseline,
and the pages through the real app in-process (first page, a deep page, a filtered page, a
job's page, a finished job's whole log stream): p50/p99 of ``--repeats`` requests each, and
the page/baseline ratio, and the CPU ms per request (steady when other work shares the
cores, as wall times are not). Goal (issue 15): p99 <= 200 ms per page.

    python bench/ui_jobs.py [--jobs 10000] [--repeats 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def seed(n: int) -> str:
    """Insert ``n`` jobs (and their attempts, workers, events) in bulk; return a finished id."""
    from aifab.core.db import session_scope
    from aifab.jobs import submit
    from aifab.jobs.launch import attempt_dir
    from aifab.jobs.tables import AttemptRow, JobRow, WorkerRow

    spec = submit({"name": "seed", "run": {"command": ["true"]}})["spec"]
    now = time.time() - n
    workers = [f"worker_bench_{w}" for w in range(8)]
    with session_scope() as s:
        for w in workers:
            cap = {"cpu": 8.0, "memory_mb": 32768.0, "gpu": 0}
            s.add(WorkerRow(id=w, host="bench", pid=1, executor="local", capacity=cap))
        for i in range(n):
            state = "pending" if i >= n - 2000 else ("running" if i % 200 == 0 else "succeeded")
            job_id = f"job_bench_{i:06d}"
            started = now + i if state != "pending" else None
            s.add(
                JobRow(
                    id=job_id, name=f"bench-{i}", queue="default", priority=0, state=state,
                    spec=spec, executor="local", attempt=0 if started is None else 1,
                    usage={"wall_s": 1.0, "cpu_s": 0.5, "gpu_s": 0.0, "peak_rss_mb": 20.0},
                    submitted_at=now + i, started_at=started,
                    finished_at=started + 1 if state == "succeeded" and started else None,
                    reason="waiting for resources" if state == "pending" else None,
                )
            )  # fmt: skip
        s.flush()  # the attempts' foreign keys need their jobs
        for i in range(n - 2000):
            started = now + i
            state = "running" if i % 200 == 0 else "succeeded"
            s.add(
                AttemptRow(
                    job_id=f"job_bench_{i:06d}", number=1, worker_id=workers[i % 8],
                    state=state, placement=["local"], started_at=started,
                    finished_at=started + 1 if state == "succeeded" else None,
                )
            )  # fmt: skip
    finished = "job_bench_000001"
    path = attempt_dir(finished, 1) / "replica-0.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"step {i} loss {1 / (i + 1):.4f}\n" for i in range(2000)))
    return finished


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float, float]:
    """p50 and p99 wall ms of ``repeats`` calls (after one warm-up), and the mean CPU ms.

    The CPU time (all threads of this process) does not grow when other work shares the cores.
    """
    fn()
    times = []
    cpu0 = time.process_time()
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    cpu = (time.process_time() - cpu0) * 1e3 / repeats
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(0.99 * len(times)))], cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bench-ui-jobs-")) / "ws"
    os.environ["AIFAB_HOME"] = str(home)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from fastapi.testclient import TestClient

    from aifab.jobs import attempt_timeline, list_jobs, queue_usage
    from aifab.serve.app import create_app
    from aifab.serve.keys import create_key

    t0 = time.perf_counter()
    finished = seed(args.jobs)
    print(f"seeded {args.jobs} jobs in {time.perf_counter() - t0:.1f} s")

    def services() -> None:
        list_jobs(limit=51)
        queue_usage()
        attempt_timeline(limit=40)

    base = timed(services, args.repeats)
    print(
        f"baseline: the list page's service calls  p50 {base[0]:7.1f} ms  p99 {base[1]:7.1f} ms"
        f"  cpu {base[2]:6.1f} ms"
    )
    _, secret = create_key("viewer", name="bench")
    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        assert client.post("/ui/login", data={"key": secret}).status_code == 200
        for path in (
            "/ui/jobs",
            f"/ui/jobs?offset={args.jobs - 100}",
            "/ui/jobs?state=running",
            f"/ui/jobs/{finished}",
            f"/ui/jobs/{finished}/logs/stream",
        ):
            status = client.get(path).status_code
            p50, p99, cpu = timed(lambda p=path: client.get(p), args.repeats)
            print(
                f"  {path:42s} {status}  p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  cpu {cpu:6.1f} ms"
                f"  ({p50 / base[0]:.2f}x the baseline's p50)"
            )


if __name__ == "__main__":
    main()
