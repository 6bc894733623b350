"""Monitors' cost on the serving path: predict latency with and without a monitor running.

One scratch workspace holds the quickstart churn model, deployed as ``churn``, and a monitor
on it (data drift of every input column, the free-text ``ticket_text`` included, prediction
drift, objectives). A real ``aifab`` server (uvicorn, request log at 100%) serves one-row
predictions to closed-loop clients. Monitors read the request log from the database and
never sit in a request, so their only cost to serving is the machine they share: phases
alternate between

* ``off``: no monitor running;
* ``on``: another process on the same workspace runs the monitor back to back (the worst
  case: a schedule fires every minute at most, and a run takes well under one),

``off, on, off, on`` so that other load on the machine hits both alike. Reported: p50/p99
of each phase (median of its repeats), the deltas, monitor runs and their mean duration.
Goal: p50 added <= 0.2 ms.

    .venv/bin/python bench/monitor_cost.py                 # ~1.5 min (+1 min to train once)
    .venv/bin/python bench/monitor_cost.py --home DIR --seconds 8 --clients 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

MONITOR = "bench-mon"


def monitor_loop(home: Path, stop_file: Path, out: Path) -> None:
    """Run the monitor back to back until ``stop_file`` exists; write runs and durations."""
    os.environ["AIFAB_HOME"] = str(home)
    from aifab.ops import run_monitor

    durations: list[float] = []
    statuses: dict[str, int] = {}
    while not stop_file.exists():
        t0 = time.perf_counter()
        result = run_monitor(MONITOR)
        durations.append(time.perf_counter() - t0)
        statuses[result["status"]] = statuses.get(result["status"], 0) + 1
    out.write_text(json.dumps({"durations": durations, "statuses": statuses}))


def _prepare(home: Path) -> tuple[str, dict[str, Any]]:
    from serve import prepare  # bench/serve.py: trains once, deploys, makes a key

    secret, row = prepare(home)
    from aifab.ops import create_monitor, list_monitors

    if MONITOR not in {m["name"] for m in list_monitors()}:
        create_monitor(MONITOR, {"deployment": "churn", "window_s": 3600, "min_rows": 30})
    return secret, row


def _phase(port: int, secret: str, row: dict[str, Any], args: argparse.Namespace) -> dict:
    from serve import load

    headers = {"authorization": f"Bearer {secret}"}
    body = json.dumps({"records": [row]}).encode()
    return asyncio.run(
        load(port, "/v1/predict/churn", headers, body, args.clients, args.seconds, 1.0, "raw")
    )


def _start_loop(home: Path, tmp: Path, k: int) -> tuple[subprocess.Popen[bytes], Path, Path]:
    stop, out = tmp / f"stop-{k}", tmp / f"loop-{k}.json"
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from monitor_cost import monitor_loop; "
        "from pathlib import Path; monitor_loop(Path(sys.argv[2]), Path(sys.argv[3]), "
        "Path(sys.argv[4]))"
    )
    cmd = [sys.executable, "-c", code, str(BENCH), str(home), str(stop), str(out)]
    return subprocess.Popen(cmd, env={**os.environ, "AIFAB_HOME": str(home)}), stop, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--home", type=Path, help="Workspace to reuse (default: a scratch one).")
    ap.add_argument("--seconds", type=float, default=10.0, help="Measured seconds per phase.")
    ap.add_argument("--clients", type=int, default=1, help="Concurrent closed-loop clients.")
    ap.add_argument("--repeats", type=int, default=2, help="off/on pairs.")
    args = ap.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="aifab-bench-moncost-"))
    secret, row = _prepare(home)
    from serve import start

    server, port = start("aifab", home, 1.0)
    tmp = Path(tempfile.mkdtemp(prefix="aifab-moncost-"))
    phases: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    runs: list[float] = []
    statuses: dict[str, int] = {}
    try:
        _phase(port, secret, row, argparse.Namespace(**{**vars(args), "seconds": 3.0}))  # log rows
        for k in range(args.repeats):
            phases["off"].append(_phase(port, secret, row, args))
            loop, stop, out = _start_loop(home, tmp, k)
            time.sleep(3.0)  # past the loop's imports and first reference read
            phases["on"].append(_phase(port, secret, row, args))
            stop.touch()
            loop.wait(timeout=300)
            done = json.loads(out.read_text())
            runs += done["durations"]
            for s, n in done["statuses"].items():
                statuses[s] = statuses.get(s, 0) + n
    finally:
        server.terminate()
        server.wait(timeout=30)
    _report(phases, runs, statuses, args)


def _report(
    phases: dict[str, list[dict[str, float]]],
    runs: list[float],
    statuses: dict[str, int],
    args: argparse.Namespace,
) -> None:
    med = {
        name: {k: statistics.median(p[k] for p in ps) for k in ("p50_ms", "p99_ms", "rps")}
        for name, ps in phases.items()
    }
    print(f"predict /v1/predict/churn, {args.clients} client(s), {args.seconds:.0f} s per phase")
    for name in ("off", "on"):
        m = med[name]
        print(
            f"monitor {name:<4} p50 {m['p50_ms']:7.2f} ms  p99 {m['p99_ms']:7.2f} ms  "
            f"{m['rps']:7.0f} req/s"
        )
    added50 = med["on"]["p50_ms"] - med["off"]["p50_ms"]
    added99 = med["on"]["p99_ms"] - med["off"]["p99_ms"]
    mean_run = statistics.mean(runs) * 1e3 if runs else float("nan")
    print(f"monitor runs: {len(runs)} ({statuses}), mean {mean_run:.0f} ms per run")
    print(
        f"added by a monitor running back to back: p50 {added50:+.2f} ms, p99 {added99:+.2f} ms"
        f" (ratio on/off p50 {med['on']['p50_ms'] / med['off']['p50_ms']:.2f}x); "
        f"goal p50 added <= 0.2 ms: {'met' if added50 <= 0.2 else 'missed'}"
    )


if __name__ == "__main__":
    main()
