"""A training job run by the jobs worker that ``aifab serve`` hosts on a thread, while the same
process serves a torch model to clients (issue 12, fault: such jobs died with SIGSEGV before
their first line; the local executor ran Python between fork and exec in that threaded process).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serve_proc import ENTRY, free_port  # noqa: E402

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RECORD = {
    "age": 41,
    "income": 52_000.0,
    "monthly_spend": 30.0,
    "support_tickets": 2,
    "plan": "basic",
    "country": "US",
    "signup_date": "2021-03-04",
    "ticket_text": "the app keeps logging me out",
}


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


def _wait_ready(proc: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "aifab serve did not start"
        time.sleep(0.2)


def test_jobs_of_the_servers_own_worker_run_while_it_serves(churn_model: dict[str, Any]) -> None:
    from aifab.jobs.service import FINAL, get_job, job_result, list_workers, submit
    from aifab.serve.keys import create_key
    from aifab.train.submit import build_job_spec

    _, secret = create_key("admin", name="worker-jobs", rate=None)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "serve", "--port", str(port)], env=os.environ.copy()
    )
    stop = threading.Event()
    answered: list[int] = []

    def traffic() -> None:  # the server's torch and uvicorn threads are busy throughout
        with httpx.Client(base_url=url, headers={"authorization": f"Bearer {secret}"}) as c:
            while not stop.is_set():
                r = c.post("/v1/predict/churn", json={"records": [RECORD] * 5}, timeout=30)
                answered.append(r.status_code)

    try:
        _wait_ready(server, url)
        deadline = time.monotonic() + 30
        while not [w for w in list_workers(alive_only=True) if w["pid"] == server.pid]:
            assert time.monotonic() < deadline, "the server hosts no jobs worker"
            time.sleep(0.2)
        clients = [threading.Thread(target=traffic, daemon=True) for _ in range(2)]
        for t in clients:
            t.start()
        config = EXAMPLES / "quickstart" / "train.yaml"
        ids = [
            submit(build_job_spec("classify", config, ["epochs=1", f"seed={i}"]))["id"]
            for i in range(2)
        ]
        deadline = time.monotonic() + 300
        while not all(get_job(j)["state"] in FINAL for j in ids):
            assert time.monotonic() < deadline, [get_job(j)["state"] for j in ids]
            assert server.poll() is None, "aifab serve died"
            time.sleep(0.5)
        for job_id in ids:
            job = get_job(job_id)
            assert (job["state"], job["exit_code"]) == ("succeeded", 0), job
            assert (job_result(job_id) or {}).get("run_id")
        stop.set()
        for t in clients:
            t.join(timeout=30)
        assert answered and set(answered) == {200}
    finally:
        stop.set()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
