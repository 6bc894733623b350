"""Monitors' cost on the serving path: predict latency with and without a monitor running.

One scratch workspace holds the quickstart churn model, deployed as ``churn``, and a monitor
on it (data drift of every input column, the free-text ``ticket_text`` included, prediction
drift, objectives). A real ``aifab`` server (uvicorn, request log at 100%) serves one-row
predictions to closed-loop clients. Monitors read the request log from the database and
never sit in a request, so their only cost to serving is the machine they share: phases
alternate between

* ``off``: no monitor running;
* ``on``: another process on the same workspace runs the monitor back to back (the worst
  case: a schedule fires every minute at most, and a run takes a few seconds), as
  ``aifab worker`` would;
* ``on-nice``: the same from a process at nice 19 (``nice -n 19 aifab worker``),

``off, on, off, on, ...`` so that other load on the machine hits both alike. The monitor
process starts once and does a first run (imports, reference, model) before any phase, so
``on`` measures steady monitor runs. Reported: p50/p99 of each phase (median of its
repeats), the deltas, monitor runs and their mean duration. Goal: p50 added <= 0.2 ms.

    .venv/bin/python bench/monitor_cost.py                 # ~2 min (+1 min to train once)
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


def monitor_loop(home: Path, flags: Path, nice: int) -> None:
    """One first run, then back-to-back runs while ``flags/run`` exists, until ``flags/stop``.

    Writes ``flags/ready`` after the first run and ``flags/out.json`` (durations, statuses).
    """
    os.nice(nice)
    os.environ["AIFAB_HOME"] = str(home)
    from aifab.ops import run_monitor

    run_monitor(MONITOR)
    (flags / "ready").touch()
    durations: list[float] = []
    statuses: dict[str, int] = {}
    while not (flags / "stop").exists():
        if not (flags / "run").exists():
            time.sleep(0.05)
            continue
        (flags / "busy").touch()
        t0 = time.perf_counter()
        result = run_monitor(MONITOR)
        durations.append(time.perf_counter() - t0)
        (flags / "busy").unlink()
        statuses[result["status"]] = statuses.get(result["status"], 0) + 1
    (flags / "out.json").write_text(json.dumps({"durations": durations, "statuses": statuses}))


def _prepare(home: Path) -> tuple[str, dict[str, Any]]:
    from serve import prepare  # bench/serve.py: trains once, deploys, makes a key

    secret, row = prepare(home)
    from aifab.ops import create_monitor, delete_monitor, list_monitors

    if MONITOR in {m["name"] for m in list_monitors()}:
        delete_monitor(MONITOR)
    # The last 30 s of the log: a few thousand requests at this bench's rate.
    create_monitor(MONITOR, {"deployment": "churn", "window_s": 30, "min_rows": 30})
    return secret, row


def _phase(port: int, secret: str, row: dict[str, Any], args: argparse.Namespace) -> dict:
    from serve import load

    headers = {"authorization": f"Bearer {secret}"}
    body = json.dumps({"records": [row]}).encode()
    return asyncio.run(
        load(port, "/v1/predict/churn", headers, body, args.clients, args.seconds, 1.0, "raw")
    )


def _start_loop(home: Path, flags: Path, nice: int) -> subprocess.Popen[bytes]:
    flags.mkdir()
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from monitor_cost import monitor_loop; "
        "from pathlib import Path; monitor_loop(Path(sys.argv[2]), Path(sys.argv[3]), "
        "int(sys.argv[4]))"
    )
    cmd = [sys.executable, "-c", code, str(BENCH), str(home), str(flags), str(nice)]
    return subprocess.Popen(cmd, env={**os.environ, "AIFAB_HOME": str(home)})


def _ready(loops: dict[str, subprocess.Popen[bytes]], tmp: Path) -> None:
    deadline = time.monotonic() + 300
    for name, loop in loops.items():
        while not (tmp / name / "ready").exists():
            if loop.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the monitor loop {name} did not start")
            time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--home", type=Path, help="Workspace to reuse (default: a scratch one).")
    ap.add_argument("--seconds", type=float, default=8.0, help="Measured seconds per phase.")
    ap.add_argument("--clients", type=int, default=1, help="Concurrent closed-loop clients.")
    ap.add_argument("--repeats", type=int, default=3, help="off/on pairs.")
    args = ap.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="aifab-bench-moncost-"))
    secret, row = _prepare(home)
    from serve import start

    server, port = start("aifab", home, 1.0)
    tmp = Path(tempfile.mkdtemp(prefix="aifab-moncost-"))
    phases: dict[str, list[dict[str, float]]] = {"off": [], "on": [], "on-nice": []}
    loops: dict[str, subprocess.Popen[bytes]] = {}
    try:
        _phase(port, secret, row, argparse.Namespace(**{**vars(args), "seconds": 3.0}))  # log rows
        loops = {"on": _start_loop(home, tmp / "on", 0)}
        loops["on-nice"] = _start_loop(home, tmp / "on-nice", 19)
        _ready(loops, tmp)
        for _ in range(args.repeats):
            for name in phases:
                flag = tmp / name / "run"
                if name != "off":
                    flag.touch()
                phases[name].append(_phase(port, secret, row, args))
                flag.unlink(missing_ok=True)
                while (tmp / name / "busy").exists():  # a run never spills into the next phase
                    time.sleep(0.05)
        for name, loop in loops.items():
            (tmp / name / "stop").touch()
            loop.wait(timeout=300)
    finally:
        for loop in loops.values():
            if loop.poll() is None:
                loop.terminate()
        server.terminate()
        server.wait(timeout=30)
    done = {name: json.loads((tmp / name / "out.json").read_text()) for name in loops}
    _report(phases, done, args)


def _report(
    phases: dict[str, list[dict[str, float]]],
    done: dict[str, dict[str, Any]],
    args: argparse.Namespace,
) -> None:
    med = {
        name: {k: statistics.median(p[k] for p in ps) for k in ("p50_ms", "p99_ms", "rps")}
        for name, ps in phases.items()
    }
    print(f"predict /v1/predict/churn, {args.clients} client(s), {args.seconds:.0f} s per phase")
    off = med["off"]
    for name, m in med.items():
        runs = done.get(name, {}).get("durations", [])
        mean_run = f", {len(runs)} monitor runs of {statistics.mean(runs):.1f} s" if runs else ""
        added = "" if name == "off" else f"  added p50 {m['p50_ms'] - off['p50_ms']:+.2f} ms"
        print(
            f"monitor {name:<8} p50 {m['p50_ms']:7.2f} ms  p99 {m['p99_ms']:7.2f} ms  "
            f"{m['rps']:6.0f} req/s{added}{mean_run}"
        )
    for name in ("on", "on-nice"):
        added50 = med[name]["p50_ms"] - off["p50_ms"]
        print(
            f"{name}: p50 added {added50:+.2f} ms, p99 added "
            f"{med[name]['p99_ms'] - off['p99_ms']:+.2f} ms, ratio p50 "
            f"{med[name]['p50_ms'] / off['p50_ms']:.2f}x; goal p50 added <= 0.2 ms: "
            f"{'met' if added50 <= 0.2 else 'missed'}"
        )


if __name__ == "__main__":
    main()
