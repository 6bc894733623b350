"""Team mode on one PostgreSQL: does one slow transaction hold up everyone, and does work scale?

Processes run a gateway/worker/dashboard mix against one PostgreSQL database, each operation
its own aifab service call: key lookups (40%), request-log inserts (25%), worker heartbeats
(10%), job state changes, cancel/retry of the process's own job (10%), dashboard list pages
(10%) and commits to the process's own dataset (5%).

1. Delay: 4 processes run the mix while a fifth holds one transaction open for 5 s, once a
   read (``session_scope(readonly=True)``) and once a write (a lock on a dataset nobody else
   commits to, and an update of a job row nobody else changes). Reported: the slowest operation
   of the others during the hold, against their slowest with nothing held, and how many
   sessions PostgreSQL shows waiting for a lock the holder holds during the hold
   (``pg_blocking_pids`` over ``pg_stat_activity``, every 20 ms): a figure the machine's load
   does not blur.
2. Throughput: operations per second with 1, 2, 4 and 8 processes.

The baseline is the team-wide lock aifab used before (every transaction took one advisory
lock at BEGIN), put back on the engines with ``--baseline``'s hook; aifab is the code as it is.
A throwaway PostgreSQL server is started from ``pg_config --bindir`` (as tests/team does)
unless ``--db-url`` names one.

    .venv/bin/python bench/team_db.py
    .venv/bin/python bench/team_db.py --seconds 10 --procs 1,2,4,8,16
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The team-wide advisory lock of the old scheme (any fixed 64-bit number, as it was).
OLD_LOCK_KEY = 0x616966616254584E
HOLD_S = 5.0
MIX = [
    ("key_lookup", 40),
    ("request_log", 25),
    ("heartbeat", 10),
    ("job_state", 10),
    ("dashboard", 10),
    ("dataset_commit", 5),
]


def _global_lock() -> None:
    """The baseline: every transaction on the metadata DB takes one team-wide lock at BEGIN."""
    from sqlalchemy import event

    from aifab.core.db import get_engine

    def begin(conn: Any) -> None:
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({OLD_LOCK_KEY})")

    event.listen(get_engine(), "begin", begin)


def _setup(n: int) -> dict[str, Any]:
    """Keys, one job and one dataset per process, a worker, a few hundred log rows."""
    from aifab.core.db import get_engine
    from aifab.data.catalog import commit_query
    from aifab.jobs import scheduler, service
    from aifab.jobs.resources import Resources
    from aifab.serve.keys import create_key

    get_engine()
    secrets = [create_key("client", name=f"k{i}")[1] for i in range(20)]
    spec = {"run": {"command": ["true"]}, "resources": {"cpu": 0.1, "memory": 16}}
    jobs = [service.submit({**spec, "name": f"p{i}"})["id"] for i in range(n + 1)]
    for i in range(n + 1):
        commit_query(f"ds{i}", "SELECT 1 AS x", source="bench", transform={"kind": "bench"})
    worker = scheduler.register_worker("local", Resources(1, 64, 0))
    return {"secrets": secrets, "jobs": jobs, "worker": worker}


def _op(kind: str, me: int, ctx: dict[str, Any], state: dict[str, Any]) -> None:
    from aifab.core.errors import ConflictError
    from aifab.data.catalog import commit_query, list_datasets
    from aifab.jobs import scheduler, service
    from aifab.serve.keys import authenticate

    if kind == "key_lookup":
        assert authenticate(random.choice(ctx["secrets"])) is not None
    elif kind == "request_log":
        state["log"].log(
            {
                "deployment": "bench",
                "key_id": "k",
                "route": "/v1/predict",
                "status": 200,
                "latency_ms": 3.0,
                "input": {"x": [1, 2, 3]},
                "output": {"y": 1},
                "tokens": 7,
            }
        )
        state["log"].flush()
    elif kind == "heartbeat":
        scheduler.heartbeat(ctx["worker"], 30.0)
    elif kind == "job_state":
        try:  # the job is pending or cancelled, whichever an earlier run left it
            service.cancel(ctx["jobs"][me])
        except ConflictError:
            service.retry(ctx["jobs"][me])
    elif kind == "dashboard":
        service.list_jobs(limit=50)
        list_datasets(limit=50)
    else:
        state["commits"] += 1
        commit_query(
            f"ds{me}",
            f"SELECT {state['commits']} AS x",
            source="bench",
            transform={"kind": "bench"},
        )


def _ready() -> float:
    """Say this process is warm; return the start time the parent answers with."""
    print("ready", flush=True)
    return float(sys.stdin.readline())


def _client(me: int, seconds: float, baseline: bool) -> None:
    """One process: run the mix from the start for ``seconds``; print (kind, t0, t1) per op."""
    from aifab.inference.request_log import RequestLogger

    ctx = json.loads(os.environ["BENCH_CTX"])
    if baseline:
        _global_lock()
    kinds = [k for k, w in MIX for _ in range(w)]
    state = {"log": RequestLogger(), "commits": 0}
    random.seed(me)
    for kind, _ in MIX:  # warm the engine, imports and DuckDB before the clock
        _op(kind, me, ctx, state)
    start = _ready()
    time.sleep(max(0.0, start - time.time()))
    ops = []
    while time.time() < start + seconds:
        kind = random.choice(kinds)
        t0 = time.time()
        _op(kind, me, ctx, state)
        ops.append((kind, t0, time.time()))
    state["log"].close()
    print(json.dumps(ops))


def _lock_waiters(holder: int, stop: threading.Event, samples: list[list[int]]) -> None:
    """Every 20 ms, count the sessions that wait for a lock: any, and the holder's.

    On a connection of its own, outside aifab's engine, so the baseline's lock does not hold
    the count up.
    """
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(os.environ["AIFAB_DB_URL"])
    dsn = f"host={url.host} port={url.port} user={url.username} dbname={url.database}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.wait(0.02):
            row = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE %s = ANY(pg_blocking_pids(pid))) "
                "FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'",
                (holder,),
            ).fetchone()
            samples.append([int(row[0]), int(row[1])] if row else [0, 0])


def _holder(after: float, write: bool, baseline: bool) -> None:
    """Hold one transaction open for HOLD_S, ``after`` s from the start.

    Prints when it held and the lock waiters sampled meanwhile.
    """
    from sqlalchemy import text

    from aifab.core.db import lock_aggregate, session_scope
    from aifab.jobs.tables import JobRow

    ctx = json.loads(os.environ["BENCH_CTX"])
    if baseline:
        _global_lock()
    with session_scope(readonly=True) as s:  # warm the engine and imports before the clock
        s.get(JobRow, ctx["jobs"][-1])
    start = _ready() + after
    time.sleep(max(0.0, start - time.time()))
    with session_scope(readonly=not write) as s:
        held_job = ctx["jobs"][-1]
        if write:
            lock_aggregate(s, "dataset", "held")
            row = s.get(JobRow, held_job, with_for_update=True)
            assert row is not None
            row.reason = "held"
            s.flush()
        else:
            s.get(JobRow, held_job)
        pid = int(s.scalar(text("SELECT pg_backend_pid()")))
        t0 = time.time()
        stop: threading.Event = threading.Event()
        samples: list[list[int]] = []
        watch = threading.Thread(target=_lock_waiters, args=(pid, stop, samples))
        watch.start()
        time.sleep(HOLD_S)
        stop.set()
        watch.join()
        t1 = time.time()
    print(json.dumps([t0, t1, samples]))


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def _start(procs: list[subprocess.Popen[str]]) -> None:
    """Wait until every process is warm, then start them together."""
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    at = f"{time.time() + 0.5}\n"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(at)
        p.stdin.flush()


def _collect(procs: list[subprocess.Popen[str]]) -> list[Any]:
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"a bench process failed (exit {p.returncode})")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def delay(env: dict[str, str], baseline: bool, write: bool, clients: int) -> dict[str, float]:
    """The slowest op of ``clients`` processes while another holds a transaction, and without."""
    flag = ["--baseline"] if baseline else []
    procs = [_spawn(["--client", str(i), "9", *flag], env) for i in range(clients)]
    hold = _spawn(["--hold", "2", "write" if write else "read", *flag], env)
    _start([*procs, hold])
    runs = _collect(procs)
    t0, t1, waiters = _collect([hold])[0]
    during = [e - b for ops in runs for _, b, e in ops if b < t1 and e > t0]
    timed = [(e - b, k) for ops in runs for k, b, e in ops if b < t1 and e > t0]
    slowest = max(timed, default=None)
    outside = [e - b for ops in runs for _, b, e in ops if e < t0 or b > t1]
    return {
        "max_during_s": max(during, default=0.0),
        "max_outside_s": max(outside, default=0.0),
        "p99_during_s": _p99(during),
        "p99_outside_s": _p99(outside),
        "p50_outside_s": statistics.median(outside) if outside else 0.0,
        "slowest_during": slowest[1] if slowest else "-",
        "waiting_max": max((w[0] for w in waiters), default=0),
        "waiting_mean": statistics.mean(w[0] for w in waiters) if waiters else 0.0,
        "on_holder_max": max((w[1] for w in waiters), default=0),
        "on_holder_mean": statistics.mean(w[1] for w in waiters) if waiters else 0.0,
    }


def _p99(values: list[float]) -> float:
    return sorted(values)[int(0.99 * (len(values) - 1))] if values else 0.0


def throughput(env: dict[str, str], baseline: bool, n: int, seconds: float) -> float:
    """Operations per second of ``n`` processes running the mix together."""
    flag = ["--baseline"] if baseline else []
    procs = [_spawn(["--client", str(i), str(seconds), *flag], env) for i in range(n)]
    _start(procs)
    return sum(len(ops) for ops in _collect(procs)) / seconds


def _database(url: str | None) -> tuple[str, Any]:
    if url:
        return url, None
    sys.path[:0] = [str(ROOT / "tests" / "team"), str(ROOT / "tests")]
    from pg import PostgresServer, find_bindir

    bindir, why = find_bindir()
    if bindir is None:
        raise SystemExit(why)
    server = PostgresServer(bindir)
    return server.new_database("bench"), server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db-url", help="a PostgreSQL database to use (default: a throwaway one)")
    ap.add_argument("--seconds", type=float, default=6.0, help="length of each throughput run")
    ap.add_argument("--procs", default="1,2,4,8", help="process counts for throughput")
    ap.add_argument("--clients", type=int, default=4, help="processes beside the holder")
    ap.add_argument("--client", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--hold", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        _client(int(args.client[0]), float(args.client[1]), args.baseline)
        return
    if args.hold:
        _holder(float(args.hold[0]), args.hold[1] == "write", args.baseline)
        return

    counts = [int(n) for n in args.procs.split(",")]
    url, server = _database(args.db_url)
    home = tempfile.mkdtemp(prefix="aifab-bench-team-")
    env = {
        **os.environ,
        "AIFAB_HOME": home,
        "AIFAB_DB_URL": url,
        "AIFAB_ACTOR": "bench",
        "PYTHONPATH": str(ROOT / "src"),
    }
    os.environ.update(env)
    try:
        env["BENCH_CTX"] = json.dumps(_setup(max(counts + [args.clients])))
        load = os.getloadavg()
        print(f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} at start")
        print(
            f"delay of {args.clients} processes' ops while another holds a transaction {HOLD_S:g} s"
        )
        for write in (False, True):
            what = "write (dataset lock + job row)" if write else "read"
            base = delay(env, True, write, args.clients)
            ours = delay(env, False, write, args.clients)
            ms = {k: (base[k] * 1e3, ours[k] * 1e3) for k in base if k.endswith("_s")}
            print(
                f"  held {what}: slowest op during the hold: baseline (team-wide lock) "
                f"{ms['max_during_s'][0]:.0f} ms, aifab {ms['max_during_s'][1]:.0f} ms, ratio "
                f"{base['max_during_s'] / max(ours['max_during_s'], 1e-9):.1f}x "
                f"(a {ours['slowest_during']}); p99 during "
                f"{ms['p99_during_s'][0]:.0f} / {ms['p99_during_s'][1]:.0f} ms; with nothing "
                f"held: slowest {ms['max_outside_s'][0]:.0f} / {ms['max_outside_s'][1]:.0f} ms, "
                f"p99 {ms['p99_outside_s'][0]:.0f} / {ms['p99_outside_s'][1]:.0f} ms, "
                f"median {ms['p50_outside_s'][0]:.1f} / {ms['p50_outside_s'][1]:.1f} ms"
            )
            print(
                "    sessions waiting for a lock the holder holds (sampled every 20 ms): "
                f"baseline mean {base['on_holder_mean']:.2f}, max {base['on_holder_max']}; "
                f"aifab mean {ours['on_holder_mean']:.2f}, max {ours['on_holder_max']} "
                f"(for any lock, e.g. each other's audit appends: baseline mean "
                f"{base['waiting_mean']:.2f}, aifab mean {ours['waiting_mean']:.2f}, "
                f"max {ours['waiting_max']})"
            )
        print(f"throughput (ops/s, {args.seconds:g} s per run)")
        rates: dict[bool, dict[int, float]] = {True: {}, False: {}}
        for n in counts:
            for baseline in (True, False):
                rates[baseline][n] = throughput(env, baseline, n, args.seconds)
            print(
                f"  {n} process(es): baseline {rates[True][n]:.0f}, aifab {rates[False][n]:.0f}, "
                f"ratio {rates[False][n] / max(rates[True][n], 1e-9):.2f}x"
            )
        top, one = max(counts), min(counts)
        print(
            f"  scaling {one} -> {top} processes: baseline "
            f"{rates[True][top] / rates[True][one]:.2f}x, aifab "
            f"{rates[False][top] / rates[False][one]:.2f}x"
        )
        load = os.getloadavg()
        print(f"load average {load[0]:.2f} at the end")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
