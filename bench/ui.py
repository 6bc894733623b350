"""The dashboard's server time per page in a big workspace, and what it costs the serving path.

Seeds a workspace (once; reused with ``--home``) with the quickstart, ``--runs`` MLflow runs
(default 10,000), ``--versions`` dataset versions (1,000) and ``--events`` audit events
(100,000), starts ``aifab serve``, signs in with a viewer key and times every page
(one warm-up GET, then ``--repeats`` GETs each, p50/p99 of the wall time on 127.0.0.1).
Then, in one run, it measures one-row predictions alone and while a poller reloads the live
pages (the home page's deployments table, the deployment page) as a browser left open would,
and prints the p50 of both and the difference. Goals (issue 15): p99 <= 200 ms per page; p50
added to predictions <= 0.1 ms.

    python bench/ui.py [--home DIR] [--runs 10000] [--versions 1000] [--events 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
_SEEDED = "bench-ui-seeded.json"


def seed(home: Path, runs: int, versions: int, events: int) -> dict[str, Any]:
    """Fill ``home`` (once: a marker file records what was made)."""
    os.environ["AIFAB_HOME"] = str(home)
    marker = home / _SEEDED
    wanted = {"runs": runs, "versions": versions, "events": events}
    if marker.is_file() and json.loads(marker.read_text())["wanted"] == wanted:
        return json.loads(marker.read_text())
    from aifab.pipeline.runner import run_pipeline

    t0 = time.perf_counter()
    result = run_pipeline(ROOT / "examples" / "quickstart" / "pipeline.yaml")
    assert result.ok, result.error
    print(f"quickstart: {time.perf_counter() - t0:.1f} s", flush=True)
    _seed_runs(runs)
    _seed_versions(versions)
    _seed_events(events)
    from aifab.serve.keys import create_key

    _, viewer = create_key("viewer", name="bench-ui", rate=None)
    _, client = create_key("client", name="bench-ui-client", rate=None)
    info = {"wanted": wanted, "viewer": viewer, "client": client}
    marker.write_text(json.dumps(info))
    return info


def _seed_runs(n: int) -> None:
    from mlflow.entities import Metric, Param

    from aifab.track import get_client

    client = get_client()
    exp = client.create_experiment(f"bench-ui-{int(time.time())}")
    t0 = time.perf_counter()
    now = int(time.time() * 1000)
    for i in range(n):
        run = client.create_run(exp, run_name=f"bench-{i}")
        rid = run.info.run_id
        metrics = [Metric("loss", 1.0 / (s + 1 + i % 7), now, s) for s in range(5)]
        client.log_batch(rid, metrics=metrics, params=[Param("lr", str(10 ** -(i % 4)))])
        client.set_terminated(rid)
        if (i + 1) % 1000 == 0:
            print(f"  runs: {i + 1}/{n} ({time.perf_counter() - t0:.0f} s)", flush=True)


def _seed_versions(n: int) -> None:
    from aifab.data.catalog import commit_query

    t0 = time.perf_counter()
    for i in range(n):
        sql = f"SELECT range AS i, range * {i} AS x, 'v{i}' AS s FROM range(20)"
        commit_query("bench_versions", sql, source="bench", transform={"op": "bench", "i": i})
    print(f"  versions: {n} ({time.perf_counter() - t0:.0f} s)", flush=True)


def _seed_events(n: int) -> None:
    from aifab.core.actor import acting_as
    from aifab.core.audit import record_event
    from aifab.core.db import session_scope

    t0 = time.perf_counter()
    done = 0
    with acting_as("user:bench"):
        while done < n:
            with session_scope() as s:
                for i in range(done, min(n, done + 2000)):
                    record_event(s, "bench.touch", f"bench:{i % 500}", {"i": i})
            done = min(n, done + 2000)
    print(f"  audit events: {n} ({time.perf_counter() - t0:.0f} s)", flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(home: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``aifab serve`` on a free port, once ready."""
    port = _free_port()
    env = {**os.environ, "AIFAB_HOME": str(home)}
    cmd = [sys.executable, "-m", "aifab", "serve", "--port", str(port), "--no-worker"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not become ready in 180 s")


def pages(client: httpx.Client) -> list[str]:
    """The pages to time, found through the API and the workspace (first page of each list)."""
    from aifab.track import list_runs

    run_id = list_runs(limit=1)[0]["id"]
    return [
        "/ui",
        "/ui/data",
        "/ui/data/bench_versions",
        "/ui/data/bench_versions?offset=950",
        "/ui/data/bench_versions/versions/500",
        "/ui/data/customers_clean/versions/1/lineage",
        "/ui/jobs",
        "/ui/runs",
        "/ui/runs?offset=9900",
        f"/ui/runs/{run_id}",
        "/ui/models",
        "/ui/models/churn/1",
        "/ui/deployments",
        "/ui/deployments/churn",
        "/ui/kb",
        "/ui/prompts",
        "/ui/agents",
        "/ui/monitoring",
        "/ui/alerts",
        "/ui/cost",
        "/ui/audit",
        "/ui/audit?before=50000",
        "/ui/audit?actor=user%3Abench&object=bench%3A42",
    ]


def time_pages(url: str, viewer: str, repeats: int) -> dict[str, tuple[float, float, int]]:
    """p50/p99 ms and the status of every page, ``repeats`` GETs each."""
    out: dict[str, tuple[float, float, int]] = {}
    with httpx.Client(base_url=url, timeout=60) as client:
        r = client.post("/ui/login", data={"key": viewer}, follow_redirects=False)
        assert r.status_code == 303, r.text
        for path in pages(client):
            times, status = [], 0
            client.get(path)  # warm-up: the first view compiles templates and fills caches
            for _ in range(repeats):
                t0 = time.perf_counter()
                status = client.get(path).status_code
                times.append((time.perf_counter() - t0) * 1e3)
            times.sort()
            p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
            out[path] = (statistics.median(times), p99, status)
            print(f"  {path:55s} {status}  p50 {out[path][0]:7.1f} ms  p99 {p99:7.1f} ms")
    return out


def predict_p50(url: str, client_key: str, seconds: float) -> float:
    """One-row predictions one after another for ``seconds``: the p50 in ms."""
    from aifab.data import head
    from aifab.inference.loading import shared_model

    columns = list(shared_model("churn@champion").handler.input_columns)
    row = json.loads(
        json.dumps(head("customers_clean", 1).select(columns).to_pylist(), default=str)
    )
    body = {"records": row}
    times: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        headers = {"Authorization": f"Bearer {client_key}"}
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            client.post("/v1/predict/churn", json=body, headers=headers)
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def poll_live_pages(url: str, viewer: str, stop: threading.Event, every_s: float) -> int:
    """Reload the live parts as an open browser tab does, until ``stop``; returns the count."""
    count = 0
    with httpx.Client(base_url=url, timeout=30) as client:
        client.post("/ui/login", data={"key": viewer}, follow_redirects=False)
        while not stop.is_set():
            for path in ("/ui/fragments/home-deployments", "/ui/deployments/churn"):
                client.get(path)
                count += 1
            stop.wait(every_s)
    return count


def main() -> None:
    """Seed, serve, time the pages, then the serving path with and without a polling UI."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--home", type=Path, help="Workspace to seed once and reuse.")
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--versions", type=int, default=1_000)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=30, help="GETs per page.")
    ap.add_argument("--seconds", type=float, default=15.0, help="Per predict phase.")
    ap.add_argument("--poll-every", type=float, default=1.0, help="Seconds between UI polls.")
    args = ap.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="aifab-bench-ui-")) / "ws"
    info = seed(home, args.runs, args.versions, args.events)
    proc, url = start_server(home)
    try:
        print(f"pages ({args.repeats} GETs each, viewer key):")
        timed = time_pages(url, info["viewer"], args.repeats)
        quiet = predict_p50(url, info["client"], args.seconds)
        stop = threading.Event()
        polls: list[int] = []
        poller = threading.Thread(
            target=lambda: polls.append(poll_live_pages(url, info["viewer"], stop, args.poll_every))
        )
        poller.start()
        busy = predict_p50(url, info["client"], args.seconds)
        stop.set()
        poller.join()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    worst = max(timed.items(), key=lambda kv: kv[1][1])
    bad = [p for p, (_, _, status) in timed.items() if status != 200]
    print(f"\nslowest page: {worst[0]} p99 {worst[1][1]:.1f} ms (goal <= 200 ms)")
    if bad:
        print(f"pages not answering 200: {bad}")
    print(
        f"predict p50: {quiet:.2f} ms alone, {busy:.2f} ms while the UI polled "
        f"({polls[0] if polls else 0} page loads): +{busy - quiet:.2f} ms "
        f"(ratio {busy / quiet:.3f}; goal: added <= 0.1 ms)"
    )


if __name__ == "__main__":
    main()
