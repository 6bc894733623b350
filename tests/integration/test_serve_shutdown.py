"""SIGTERM stops a real ``aifab serve`` process within seconds, even with requests in flight
(issue 9, fault 1: a stalled request used to hold the server up forever)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sigterm_stops_the_server_with_a_request_in_flight(workspace: Path) -> None:
    from aifab.serve.keys import create_key

    _, secret = create_key("client", name="pusher", rate=None, datasets="*")
    port = _free_port()
    entry = "import sys; from aifab.cli.main import main; sys.argv[0] = 'aifab'; main()"
    cmd = [sys.executable, "-c", entry, "serve", "--port", str(port), "--no-worker"]
    proc = subprocess.Popen(cmd, env=os.environ.copy(), stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.2)
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
