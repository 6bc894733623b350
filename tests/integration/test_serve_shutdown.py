"""SIGTERM stops a real ``aifab serve`` process within seconds, even with requests in flight
(issue 9, fault 1: a stalled request used to hold the server up forever) and under issue 19's
floods (bogus keys, failed sign-ins, static misses, wide pushes)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serve_proc import free_port  # noqa: E402

pytestmark = pytest.mark.integration


def _start(port: int) -> subprocess.Popen[bytes]:
    """``aifab serve`` on ``port``, returned once it answers (killed if it never does)."""
    entry = "import sys; from aifab.cli.main import main; sys.argv[0] = 'aifab'; main()"
    cmd = [sys.executable, "-c", entry, "serve", "--port", str(port), "--no-worker"]
    proc = subprocess.Popen(cmd, env=os.environ.copy(), stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("server did not start")
        time.sleep(0.2)


def _stop_in(proc: subprocess.Popen[bytes]) -> float:
    """Seconds SIGTERM took to stop ``proc`` (fails the test beyond 30 s)."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("aifab serve still running 30 s after SIGTERM")
    return time.monotonic() - started


def test_sigterm_stops_the_server_under_issue_19_floods(workspace: Path) -> None:
    from aifab.data import append_records
    from aifab.serve.keys import create_key

    _, secret = create_key("client", name="pusher", rate=None, datasets="*")
    append_records("wide", [{f"c{j}": float(j) for j in range(2048)}], flush=True)
    wide = json.dumps(
        {"records": [{f"c{j}": float(i + j) for j in range(2048)} for i in range(500)]}
    ).encode()
    port = free_port()
    proc = _start(port)
    url = f"http://127.0.0.1:{port}"
    stop = threading.Event()
    answered: list[int] = []

    def flood(send: object) -> None:
        with httpx.Client(base_url=url, timeout=30) as client:
            while not stop.is_set():
                # The server going away mid-request is what this test does.
                with contextlib.suppress(httpx.HTTPError):
                    answered.append(send(client).status_code)  # type: ignore[operator]

    sends = [
        lambda c: c.post(
            "/v1/deployments", headers={"X-API-Key": f"aifab-{secrets.token_urlsafe(32)}"}
        ),
        lambda c: c.post("/ui/login", data={"key": f"aifab-{secrets.token_urlsafe(8)}"}),
        lambda c: c.get(f"/ui/static/{secrets.token_hex(140)}.js"),
        lambda c: c.post(
            "/v1/datasets/wide/records",
            content=wide,
            headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
        ),
    ]
    threads = [threading.Thread(target=flood, args=(s,), daemon=True) for s in sends]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while len(answered) < 60 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert 429 in answered and 500 not in answered
        assert _stop_in(proc) < 15
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_stops_the_server_with_a_request_in_flight(workspace: Path) -> None:
    from aifab.serve.keys import create_key

    _, secret = create_key("client", name="pusher", rate=None, datasets="*")
    port = free_port()
    proc = _start(port)
    try:
        # A client that sends half its body and stalls: the request stays in flight.
        stalled = socket.create_connection(("127.0.0.1", port))
        stalled.sendall(
            b"POST /v1/datasets/slow/records HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n"
            + f"Authorization: Bearer {secret}\r\n\r\n".encode()
            + b'{"records": [{"a": '
        )
        time.sleep(1.0)
        assert _stop_in(proc) < 15
        stalled.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_stops_the_server_while_renders_attack(workspace: Path) -> None:
    """Issue 19, item 1: seven hostile renders used to pin seven threads, and SIGTERM no longer
    stopped the server (47 s, then SIGKILL). Renders now stop at their limits (422)."""
    import concurrent.futures

    from aifab.prompts import create_prompt
    from aifab.serve.keys import create_key

    create_prompt(
        "loops",
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    )
    create_prompt(
        "macros",
        "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
        "{{ f(60) }}",
    )
    # Seven clients (a caller may run two renders at once; more answer 429).
    secrets = [
        create_key("client", name=f"renderer{i}", rate=None, token_quota=None)[1] for i in range(7)
    ]
    names = ["loops", "macros"] * 3 + ["loops"]
    port = free_port()
    proc = _start(port)
    base = f"http://127.0.0.1:{port}"

    def attack(name: str, secret: str) -> int:
        try:
            r = httpx.post(
                f"{base}/v1/prompts/{name}/render",
                json={"variables": {}},
                headers={"Authorization": f"Bearer {secret}"},
                timeout=60,
            )
            return r.status_code
        except httpx.TransportError:
            return 0  # the server went away mid-request: what SIGTERM is for

    try:
        with concurrent.futures.ThreadPoolExecutor(7) as pool:
            answers = list(pool.map(attack, names, secrets))
        assert answers == [422] * 7  # each stopped at its limit, none a 500
        for name, secret in zip(names, secrets, strict=True):
            threading.Thread(target=attack, args=(name, secret), daemon=True).start()
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("aifab serve still running 30 s after SIGTERM with renders in flight")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
