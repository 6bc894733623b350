"""A real ``aifab serve`` process for tests that need one in its own directory and environment."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

#: ``python -c ENTRY serve ...`` runs the CLI as the ``aifab`` script would.
ENTRY = "import sys; from aifab.cli.main import main; sys.argv[0] = 'aifab'; main()"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM ``proc``, then SIGKILL if it has not exited within 30 s."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def http_process(
    cmd: list[str],
    health_url: str,
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    log: Path | None = None,
    timeout_s: float = 180.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``cmd`` until ``health_url`` answers 200; yield the process; stop it afterwards.

    Output goes to ``log`` (quoted when the process dies before answering). The process is
    stopped with SIGTERM, then SIGKILL after 30 s, when the block ends.
    """
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(health_url, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:] if log else ""
                raise AssertionError(f"{cmd[:4]} exited with {proc.returncode}: {tail}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{health_url} did not answer within {timeout_s:g} s")
            time.sleep(0.3)
        yield proc
    finally:
        stop(proc)
        if log:
            out.close()  # type: ignore[union-attr]


@contextmanager
def aifab_serve(
    env: dict[str, str], cwd: Path, *args: str, timeout_s: float = 180.0
) -> Iterator[str]:
    """Run ``aifab serve --port P ARGS`` in ``cwd`` until it answers; yield its base URL.

    Its output goes to ``cwd/aifab-serve.log``; the server is stopped when the block ends.
    """
    port = free_port()
    cmd = [sys.executable, "-c", ENTRY, "serve", "--port", str(port), *args]
    url = f"http://127.0.0.1:{port}"
    with http_process(
        cmd, f"{url}/healthz", cwd=cwd, env=env, log=cwd / "aifab-serve.log", timeout_s=timeout_s
    ):
        yield url
