"""Drift -> alert -> retrain -> gate -> canary -> promotion, end to end, in one command.

    python examples/drift/run.py [--home DIR] [--keep] [--port 8765]

It works in a workspace of its own, so yours is left as it was: a new folder inside
``$AIFAB_HOME`` when that is set (the system's temp folder otherwise), removed at the end
unless ``--keep``; ``--home DIR`` uses DIR and keeps it.

Builds the quickstart churn model, serves it with ``aifab serve``, replays normal traffic and
then traffic that shifts (a new country, older customers, income inflation), runs the monitor
(the drift alert fires), and runs the retrain policy: a retraining job on the newest data, the
evaluation gate against the champion, a 30% canary watched under live traffic, promotion.
Prints each step and the wall time from the first shifted request to the promoted model.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
INPUTS = "age, income, monthly_spend, support_tickets, plan, country, signup_date, ticket_text"


def aifab(*args: str, env: dict[str, str], json_out: bool = False) -> Any:
    """Run ``aifab ARGS`` in its own process; exit with its error line if it fails."""
    cmd = [sys.executable, "-m", "aifab", *args] + (["--json"] if json_out else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=HERE)
    if proc.returncode != 0:
        sys.exit(f"aifab {' '.join(args)} failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout) if json_out else proc.stdout


def rows(env: dict[str, str]) -> list[dict[str, Any]]:
    """The held-out customers (valid and test splits) as request records."""
    sql = f"SELECT {INPUTS} FROM customers_split WHERE split <> 'train'"
    code = (
        "import json,sys; from aifab.data import query; "
        f"t = query({sql!r}).to_pylist(); "
        "[r.update(signup_date=str(r['signup_date'])) for r in t]; print(json.dumps(t))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return list(json.loads(out.stdout))


def shifted(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same customers in a new market: another country, older, richer."""
    return [
        {**r, "country": "BR", "age": (r["age"] or 30) + 20, "income": (r["income"] or 0) * 2.5}
        for r in batch
    ]


def send(client: httpx.Client, batch: list[dict[str, Any]], times: int) -> None:
    """``times`` predict calls of 5 records each, cycling through ``batch``."""
    for i in range(times):
        rec = batch[(i * 5) % len(batch) : (i * 5) % len(batch) + 5] or batch[:5]
        r = client.post("/v1/predict/churn", json={"records": rec})
        r.raise_for_status()


def main() -> None:
    """Build, serve, watch, shift, retrain, gate, canary, promote."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--home", default=None, help="workspace to use and keep (default: a new one)")
    ap.add_argument("--keep", action="store_true", help="keep the new workspace at the end")
    ap.add_argument("--port", type=int, default=8765)
    args = ap.parse_args()
    home = args.home or _new_workspace()
    env = {**os.environ, "AIFAB_HOME": home, "HF_HUB_OFFLINE": "1", "AIFAB_ACTOR": "user:example"}
    print(f"workspace: {home}")
    try:
        _example(args.port, env)
    finally:
        if args.home is None and not args.keep:
            shutil.rmtree(home, ignore_errors=True)
            print(f"removed the example's workspace {home} (--keep keeps it)")


def _new_workspace() -> str:
    """A new folder for the example: inside ``$AIFAB_HOME`` when set, else the temp folder."""
    parent = os.environ.get("AIFAB_HOME")
    if parent:
        Path(parent, "examples").mkdir(parents=True, exist_ok=True)
        return tempfile.mkdtemp(prefix="drift-", dir=Path(parent, "examples"))
    return tempfile.mkdtemp(prefix="aifab-drift-")


def _example(port: int, env: dict[str, str]) -> None:
    t0 = time.time()
    aifab("run", str(HERE.parent / "quickstart" / "pipeline.yaml"), env=env)
    print(f"1. quickstart model churn@champion built ({time.time() - t0:.0f} s)")
    key = aifab(
        "keys",
        "create",
        "--role",
        "admin",
        "--name",
        "example",
        "--rate",
        "none",
        env=env,
        json_out=True,
    )
    server = subprocess.Popen(
        # The server's own jobs worker runs the retraining job the policy submits.
        [sys.executable, "-m", "aifab", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers={"authorization": f"Bearer {key['secret']}"},
        timeout=60,
    )
    try:
        run_loop(client, env)
    finally:
        server.terminate()
        server.wait(timeout=60)


def run_loop(client: httpx.Client, env: dict[str, str]) -> None:
    """Everything after the server starts."""
    deadline = time.time() + 180
    while True:
        try:
            if client.get("/readyz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.time() > deadline:
            sys.exit("the server did not come up")
        time.sleep(0.5)
    print("2. aifab serve is up")
    data = rows(env)
    aifab("monitor", "create", "churn-watch", "--spec", "monitor.yaml", env=env)
    aifab("policy", "create", "drift-loop", "--spec", "policy.yaml", env=env)
    send(client, data, 40)
    first = client.post("/v1/monitors/churn-watch/run").json()
    drifted = first["report"].get("drift", {}).get("drifted")
    print(f"3. normal traffic: monitor status {first['status']}, drifted {drifted}")
    t_shift = time.time()
    send(client, shifted(data), 120)
    result = client.post("/v1/monitors/churn-watch/run").json()
    drifted = result["report"].get("drift", {}).get("drifted")
    print(f"4. shifted traffic: monitor status {result['status']}, drifted {drifted}")
    print(f"   alerts fired: {[a['rule'] for a in result['alerts']]}")
    stop = threading.Event()

    def feed() -> None:  # clients keep calling while the canary is watched
        while not stop.is_set():
            send(client, shifted(data), 5)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        out = aifab("policy", "run", "drift-loop", env=env, json_out=True)
    finally:
        stop.set()
        feeder.join(timeout=30)
    for step in out["steps"]:
        keep = ("why", "job", "model", "passed", "decision", "requests")
        detail = {k: v for k, v in step.items() if k in keep}
        print(f"   - {step['step']}: {detail}")
    print(f"5. policy outcome: {out['outcome']} ({out['why']})")
    served = client.post("/v1/predict/churn", json={"records": data[:1]}).json()["model"]
    print(f"6. clients are now served by {served}")
    print(f"wall time from the first shifted request to the outcome: {time.time() - t_shift:.1f} s")


if __name__ == "__main__":
    main()
