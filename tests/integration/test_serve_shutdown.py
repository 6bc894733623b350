"""SIGTERM stops a real ``aifab serve`` process within seconds, even with requests in flight
(issue 9, fault 1: a stalled request used to hold the server up forever)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(proc: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
        time.sleep(0.2)


def test_sigterm_stops_the_server_with_a_request_in_flight(workspace: Path) -> None:
    from aifab.serve.keys import create_key

    _, secret = create_key("client", name="pusher", rate=None, datasets="*")
    port = _free_port()
    entry = "import sys; from aifab.cli.main import main; sys.argv[0] = 'aifab'; main()"
    cmd = [sys.executable, "-c", entry, "serve", "--port", str(port), "--no-worker"]
    proc = subprocess.Popen(cmd, env=os.environ.copy(), stderr=subprocess.PIPE)
    try:
        _wait_ready(proc, port)
        # A client that sends half its body and stalls: the request stays in flight.
        stalled = socket.create_connection(("127.0.0.1", port))
        stalled.sendall(
            b"POST /v1/datasets/slow/records HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n"
            + f"Authorization: Bearer {secret}\r\n\r\n".encode()
            + b'{"records": [{"a": '
        )
        time.sleep(1.0)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("aifab serve still running 30 s after SIGTERM")
        assert time.monotonic() - started < 15
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
    port = _free_port()
    entry = "import sys; from aifab.cli.main import main; sys.argv[0] = 'aifab'; main()"
    cmd = [sys.executable, "-c", entry, "serve", "--port", str(port), "--no-worker"]
    proc = subprocess.Popen(cmd, env=os.environ.copy(), stderr=subprocess.DEVNULL)
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
        _wait_ready(proc, port)
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
