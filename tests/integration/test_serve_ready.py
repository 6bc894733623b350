"""``aifab serve`` says when it is ready, and ``aifab deployments wait`` waits for it: a request
sent right after either answers 200, never 503 "still loading" (issue 36, item 3)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from aifab.serve.keys import create_key

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serve_proc import ENTRY, free_port, stop  # noqa: E402

pytestmark = pytest.mark.integration

RECORD = Path(__file__).resolve().parents[2] / "examples" / "tour" / "record.json"


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def secret(churn_model: dict[str, Any]) -> str:
    """A client key; the quickstart (run by ``churn_model``) deployed ``churn``."""
    return create_key("client", name="ready-test", rate=None)[1]


def aifab(*args: str) -> list[str]:
    return [sys.executable, "-c", ENTRY, *args]


@contextmanager
def serving(port: int) -> Iterator[subprocess.Popen[str]]:
    """``aifab serve --port PORT`` with stdout piped (as ``aifab serve | ...`` would see it)."""
    proc = subprocess.Popen(
        aifab("serve", "--port", str(port), "--no-worker"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
    )
    try:
        yield proc
    finally:
        stop(proc)


def predict(url: str, secret: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/predict/churn",
        headers={"Authorization": f"Bearer {secret}"},
        json=json.loads(RECORD.read_text()),
        timeout=30,
    )


def test_serve_prints_one_ready_line_after_which_a_request_is_served(secret: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving(port) as proc:
        lines: list[str] = []
        found = threading.Event()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                if line.startswith("aifab ready"):
                    found.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 180
        while not found.wait(0.2):
            assert proc.poll() is None, f"serve exited: {lines}"
            assert time.monotonic() < deadline, f"no ready line in {lines}"
        ready = [line for line in lines if line.startswith("aifab ready")]
        assert ready == [f"aifab ready on {url}: 1 deployment serving"]
        answer = predict(url, secret)
        assert answer.status_code == 200, answer.text
        assert answer.json()["predictions"]


def test_deployments_wait_returns_once_the_deployment_serves(secret: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving(port):
        # Started at once: the wait must also ride out the server's own start-up.
        done = subprocess.run(
            aifab("deployments", "wait", "churn", "--url", url, "--timeout", "180"),
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"deployment churn ready on {url} (primary churn@")
        answer = predict(url, secret)
        assert answer.status_code == 200, answer.text
        everything = subprocess.run(
            aifab("deployments", "wait", "--url", url), capture_output=True, text=True, timeout=60
        )
        assert everything.returncode == 0, everything.stderr
        assert everything.stdout == f"aifab ready on {url}: 1 deployment serving\n"


def test_deployments_wait_names_what_is_wrong(churn_model: dict[str, Any]) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    nobody = subprocess.run(
        aifab("deployments", "wait", "--url", url, "--timeout", "0.5"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert nobody.returncode != 0
    assert f"{url} not ready after 0.5 s: no answer" in nobody.stderr
    assert len(nobody.stderr.strip().splitlines()) == 1
    unknown = subprocess.run(
        aifab("deployments", "wait", "nope", "--url", url), capture_output=True, text=True
    )
    assert unknown.returncode != 0
    assert unknown.stderr == "error: no deployment 'nope' (deployments: churn)\n"
