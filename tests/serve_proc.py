"""A real ``aifab serve`` process for tests that need one in its own directory and environment."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

#: ``python -c ENTRY serve ...`` runs the CLI as the ``aifab`` script would.
ENTRY = "import sys; from aifab.cli.main import main; sys.argv[0] = 'aifab'; main()"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def aifab_serve(
    env: dict[str, str], cwd: Path, *args: str, timeout_s: float = 180.0
) -> Iterator[str]:
    """Run ``aifab serve --port P ARGS`` in ``cwd`` until it answers; yield its base URL.

    The server is stopped (SIGTERM, then SIGKILL after 30 s) when the block ends.
    """
    port = free_port()
    cmd = [sys.executable, "-c", ENTRY, "serve", "--port", str(port), *args]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                raise AssertionError(f"aifab serve exited: {proc.stderr.read()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"aifab serve did not answer within {timeout_s:g} s")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
