"""Hostile requests vs. another key's predictions: the victim's latency, quiet and under attack.

One ``aifab serve`` process serves the quickstart churn model. A victim key sends one-row
predictions one after another for ``--seconds``, first alone (the baseline), then while
attackers send what issue 9 found: 100 MB unauthenticated bodies, 100 MB chunked bodies to
predict, 20,000-column pushes, wide pushes that seal a version, deeply nested JSON and
stalled uploads; and what issue 19 found: floods of random bogus keys and of failed dashboard
sign-ins, distinct and over-long ``/ui/static`` misses, and 500-row x 2,048-column pushes into
an existing dataset; and what issue 31 found: dashboard thumbnails of a lake cell holding an
ICO whose header says 16x16 around an 8,000 x 8,000 PNG, and prompt renders of one
``wordwrap(1)`` over 450k characters (each of those from four threads). It prints the victim's
P50/P99 in both phases, their ratio, what the attackers were answered, the largest RSS of the
server with all its processes (the worker pool's included) under attack, and how long SIGTERM
took to stop the server with the attack still running. Goals: the victim's P99 under attack
below 100 ms (issue 31: at most 3x its quiet P99); RSS under 2 GB; SIGTERM within 5 s.

    python bench/hostile.py [--seconds 20] [--home DIR] [--only ico-thumbnail,render-wordwrap]
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_MIB = 1024 * 1024
_CHUNK = b"x" * _MIB


def ico_bomb(side: int = 8000) -> bytes:
    """An ICO whose directory says 16x16 but which holds a ``side`` x ``side`` PNG (~60 KB)."""
    import io
    import struct

    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (side, side), 0).save(buf, format="PNG")
    png = buf.getvalue()
    entry = struct.pack("<BBBBHHII", 16, 16, 0, 0, 1, 32, len(png), 6 + 16)
    return struct.pack("<HHH", 0, 1, 1) + entry + png


def prepare_issue31(home: Path) -> str:
    """A dataset with an ICO-bomb cell, the ``wrap`` prompt; the attacker's viewer key."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from aifab.data import ingest, list_datasets
    from aifab.prompts import create_prompt, list_prompts
    from aifab.serve.keys import create_key

    if "icons" not in {d["name"] for d in list_datasets()}:
        path = home.parent / "icons.parquet"
        pq.write_table(pa.table({"image": pa.array([ico_bomb()], pa.binary())}), path)
        ingest("icons", str(path))
    if "wrap" not in {p["name"] for p in list_prompts()}:
        create_prompt("wrap", "{{ text | wordwrap(1) }}", variables=["text"])
    _, viewer = create_key("viewer", name="attacker-viewer", rate=None)
    return viewer


def prepare(home: Path) -> tuple[str, str, dict[str, Any]]:
    """The churn model deployed, a victim key, an attacker key, and one sample record."""
    os.environ["AIFAB_HOME"] = str(home)
    import datetime as dt

    from aifab.data.catalog import resolve
    from aifab.inference.deployments import create_deployment, list_deployments
    from aifab.inference.loading import load_served_model
    from aifab.models.checkpoint import read_sidecar
    from aifab.serve.keys import create_key
    from aifab.track.registry import download_model, resolve_model
    from aifab.train.datasets import read_table

    try:
        resolve_model("churn@champion")
    except Exception:  # noqa: BLE001 - first run in this workspace
        from aifab.pipeline.runner import run_pipeline

        print("training the quickstart churn model (once per workspace)...", flush=True)
        run_pipeline(ROOT / "examples" / "quickstart" / "pipeline.yaml")
    if "churn" not in {d["name"] for d in list_deployments()}:
        create_deployment("churn@champion", name="churn")
    from aifab.data import append_records

    # The dataset the 2,048-column pushes land in already exists (its schema is known).
    append_records("wide2048", [{f"c{j}": float(j) for j in range(2048)}], flush=True)
    _, victim = create_key("client", name="victim", rate=None)
    # The default rate of a client key (600/min): floods are what rate limits are for.
    _, attacker = create_key("client", name="attacker", datasets="*")
    ref = read_sidecar(download_model("churn@champion"))["meta"]["datasets"][0]["ref"]
    raw = read_table(resolve(ref)).slice(0, 1).to_pylist()[0]
    columns = load_served_model("churn@champion").handler.input_columns
    row = {c: raw[c].isoformat() if isinstance(raw[c], dt.date) else raw[c] for c in columns}
    return victim, attacker, row


def start_server(home: Path) -> tuple[subprocess.Popen[bytes], int]:
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    entry = "import sys; from aifab.cli.main import main; sys.argv[0] = 'aifab'; main()"
    cmd = [sys.executable, "-c", entry, "serve", "--port", str(port), "--no-worker"]
    proc = subprocess.Popen(cmd, env={**os.environ, "AIFAB_HOME": str(home)})
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return proc, port
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the server did not start")
        time.sleep(0.2)


def victim_latencies(port: int, key: str, row: dict[str, Any], seconds: float) -> list[float]:
    """One-row predictions back to back on one keep-alive connection; seconds each."""
    import httpx

    out: list[float] = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        headers = {"Authorization": f"Bearer {key}"}
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            r = client.post("/v1/predict/churn", json={"records": [row]}, headers=headers)
            out.append(time.perf_counter() - t0)
            if r.status_code != 200:
                raise SystemExit(f"victim got {r.status_code}: {r.text[:200]}")
    return out


def raw_send(port: int, head: list[str], body: Any, total: int, chunked: bool) -> int:
    """Send a request whose body is ``total`` bytes (or ``body``); the status answered."""
    head = [*head, "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}"]
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        try:
            if body is not None:
                sock.sendall(body)
            else:
                sent = 0
                while sent < total:
                    sock.sendall(b"%x\r\n%s\r\n" % (_MIB, _CHUNK) if chunked else _CHUNK)
                    sent += _MIB
                if chunked:
                    sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # answered and closed early: what we want
        reply = sock.recv(4096)
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/") else 0


def issue31_senders(port: int, key: str, viewer: str) -> dict[str, Any]:
    """Issue 31's attacks: ICO-bomb thumbnails (signed in as a viewer), wordwrap renders."""
    import httpx

    base = f"http://127.0.0.1:{port}"
    local = threading.local()

    def session() -> httpx.Client:
        if not hasattr(local, "http"):
            local.http = httpx.Client(base_url=base, timeout=120)
            local.http.post("/ui/login", data={"key": viewer, "next": "/ui"})
        http: httpx.Client = local.http
        return http

    def thumbnail() -> int:
        url = "/ui/data/icons/versions/1/thumbnail?column=image&row=0"
        return session().get(url).status_code

    text = "a" * 450_000
    auth = {"Authorization": f"Bearer {key}"}

    def render() -> int:
        body = {"variables": {"text": text}}
        return session().post("/v1/prompts/wrap/render", json=body, headers=auth).status_code

    return {"ico-thumbnail": thumbnail, "render-wordwrap": render}


def attackers(
    port: int, key: str, stop: threading.Event, only: str | None = None, viewer: str = ""
) -> collections.Counter[str]:
    """Start the hostile senders; the counter fills with ``kind status`` answers."""
    seen: collections.Counter[str] = collections.Counter()
    auth = f"Authorization: Bearer {key}"
    base = ["Host: 127.0.0.1", "Content-Type: application/json"]
    wide = json.dumps({"records": [{f"c{i}": i for i in range(20_000)}]}).encode()
    deep = b'{"records": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    seq = iter(range(10**9))

    wide_existing = json.dumps(
        {"records": [{f"c{j}": float(i + j) for j in range(2048)} for i in range(500)]}
    ).encode()

    def bogus() -> int:  # a fresh random key each time: nothing to cache
        fake = f"Authorization: Bearer aifab-{secrets.token_urlsafe(32)}"
        body = b'{"records": []}'
        head = ["POST /v1/predict/churn HTTP/1.1", *base, fake]
        return raw_send(port, head, body, len(body), False)

    def login() -> int:
        body = f"key=aifab-{secrets.token_urlsafe(32)}&next=/ui".encode()
        head = ["POST /ui/login HTTP/1.1", "Host: 127.0.0.1"]
        head.append("Content-Type: application/x-www-form-urlencoded")
        return raw_send(port, head, body, len(body), False)

    def static_miss() -> int:
        n = next(seq)
        name = f"miss-{n}.js" if n % 2 else "a" * 260 + ".js"
        return raw_send(port, [f"GET /ui/static/{name} HTTP/1.1", "Host: x"], b"", 0, False)

    def sealing_push() -> bytes:  # a new 500-column dataset each time: a costly first seal
        record = {f"c{i}": float(i) for i in range(500)}
        return json.dumps({"records": [record], "flush": True}).encode()

    kinds = {
        "unauth-100MB": lambda: raw_send(
            port, ["POST /v1/keys HTTP/1.1", *base], None, 100 * _MIB, False
        ),
        "chunked-100MB": lambda: raw_send(
            port, ["POST /v1/predict/churn HTTP/1.1", *base, auth], None, 100 * _MIB, True
        ),
        "wide-20000": lambda: raw_send(
            port, ["POST /v1/datasets/wide/records HTTP/1.1", *base, auth], wide, len(wide), False
        ),
        "seal-500cols": lambda: raw_send(
            port,
            [f"POST /v1/datasets/seal{next(seq)}/records HTTP/1.1", *base, auth],
            (b := sealing_push()),
            len(b),
            False,
        ),
        "deep-json": lambda: raw_send(
            port, ["POST /v1/predict/churn HTTP/1.1", *base, auth], deep, len(deep), False
        ),
        "bogus-keys": bogus,
        "login-flood": login,
        "static-misses": static_miss,
        "wide-2048-existing": lambda: raw_send(
            port,
            ["POST /v1/datasets/wide2048/records HTTP/1.1", *base, auth],
            wide_existing,
            len(wide_existing),
            False,
        ),
    }

    def loop(kind: str, send: Any) -> None:
        while not stop.is_set():
            try:
                seen[f"{kind} {send()}"] += 1
            except OSError as exc:
                seen[f"{kind} {type(exc).__name__}"] += 1

    def stall() -> None:  # uploads that never finish, held open
        socks = []
        while not stop.is_set() and len(socks) < 50:
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /v1/datasets/x/records HTTP/1.1\r\nHost: x\r\n")
            s.sendall(f"{auth}\r\nContent-Length: 100000\r\n\r\n{{".encode())
            socks.append(s)
            time.sleep(0.1)
        stop.wait()
        for s in socks:
            s.close()
        seen["stalled uploads"] = len(socks)

    for kind, send in kinds.items():
        if only is None or kind in only.split(","):
            threading.Thread(target=loop, args=(kind, send), daemon=True).start()
    for kind, send in issue31_senders(port, key, viewer).items():
        if only is None or kind in only.split(","):
            for _ in range(4):  # parallel, like the issue's six clients of one key
                threading.Thread(target=loop, args=(kind, send), daemon=True).start()
    if only is None or "stall" in only.split(","):
        threading.Thread(target=stall, daemon=True).start()
    return seen


def attack_process(port: int, key: str, viewer: str, only: str | None, stop: Any, out: Any) -> None:
    """The attackers in a process of their own, so their GIL is not the victim client's."""
    local = threading.Event()
    seen = attackers(port, key, local, only, viewer)
    stop.wait()
    local.set()
    time.sleep(0.5)
    out.put(dict(seen))


class RssPeak:
    """The largest RSS of a process and all its children, sampled every 0.2 s in a thread."""

    def __init__(self, pid: int) -> None:
        self.peak = 0
        self.done = threading.Event()
        threading.Thread(target=self._watch, args=(pid,), daemon=True).start()

    def _watch(self, pid: int) -> None:
        import psutil

        root = psutil.Process(pid)
        while not self.done.wait(0.2):
            total = 0
            for p in [root, *root.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    continue
            self.peak = max(self.peak, total)


def summary(name: str, lat: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(lat, n=100)
    p50, p99 = q[49] * 1000, q[98] * 1000
    print(f"{name:<14} n={len(lat):<6} P50 {p50:7.1f} ms   P99 {p99:7.1f} ms")
    return p50, p99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="Per phase.")
    parser.add_argument("--home", type=Path, default=None, help="Workspace (kept between runs).")
    parser.add_argument(
        "--only", default=None, help="Attack kinds, comma-separated (e.g. deep-json,stall)."
    )
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="aifab-bench-hostile-")) / "ws"
    victim, attacker, row = prepare(home)
    viewer = prepare_issue31(home)
    proc, port = start_server(home)
    try:
        victim_latencies(port, victim, row, 2.0)  # warm up
        quiet = victim_latencies(port, victim, row, args.seconds)
        stop, out = multiprocessing.Event(), multiprocessing.Queue()
        attack = multiprocessing.Process(
            target=attack_process,
            args=(port, attacker, viewer, args.only, stop, out),
            daemon=True,
        )
        attack.start()
        time.sleep(1.0)
        rss = RssPeak(proc.pid)
        attacked = victim_latencies(port, victim, row, args.seconds)
        rss.done.set()
        # SIGTERM with the attack still running: the server must stop within 5 s.
        term = time.monotonic()
        proc.terminate()
        try:
            proc.wait(timeout=60)
            stopped = f"{time.monotonic() - term:.1f} s"
        except subprocess.TimeoutExpired:
            stopped = "not within 60 s"
        stop.set()
        answers = out.get(timeout=120)
        attack.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    print("victim key, one-row predictions back to back:")
    _, p99_quiet = summary("quiet", quiet)
    _, p99_attacked = summary("under attack", attacked)
    ratio = p99_attacked / p99_quiet
    print(f"P99 under attack / quiet: {ratio:.2f}x   goal: P99 under attack < 100 ms")
    print("attackers were answered:", dict(sorted(answers.items())))
    print(
        f"server RSS, all its processes, peak under attack: {rss.peak / _MIB:.0f} MB (goal < 2 GB)"
    )
    print(f"SIGTERM under attack stopped the server in {stopped} (goal < 5 s)")


if __name__ == "__main__":
    main()
