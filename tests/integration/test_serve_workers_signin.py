"""``aifab serve --workers 2`` throttles failed sign-ins once for both processes (issue 31 item
10: each process kept its own throttle, so an address could fail twice the budget)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from aifab.serve.auth_failures import FAILED_AUTH_BURST, FAILED_AUTH_PER_MIN
from serve_proc import aifab_serve  # noqa: E402

pytestmark = pytest.mark.integration


def test_workers_share_the_failed_sign_in_throttle(workspace: Path) -> None:
    workspace.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "AIFAB_HOME": str(workspace)}
    codes: list[int] = []
    with aifab_serve(env, workspace, "--workers", "2", "--no-worker") as url:
        # A new connection per attempt, so the kernel hands them to both processes.
        fresh = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(timeout=60, limits=fresh) as client:
            started = time.monotonic()
            for i in range(50):
                codes.append(client.post(f"{url}/ui/login", data={"key": f"wrong-{i}"}).status_code)
            elapsed = time.monotonic() - started
    assert set(codes) <= {401, 429}, codes
    budget = FAILED_AUTH_BURST + elapsed * FAILED_AUTH_PER_MIN / 60.0
    assert FAILED_AUTH_BURST <= codes.count(401) <= budget + 1, (codes.count(401), budget, codes)
