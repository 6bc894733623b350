"""Issue 31, item 11: record pushes take an ``Idempotency-Key`` (as Stripe's API and the IETF
draft do): a retry of a push whose answer was lost is answered with the first result, once."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests import live_http

from aifab.core.errors import NotFoundError
from aifab.data import list_versions
from aifab.serve.keys import create_key

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def server(module_workspace: Path, live_server: Callable[..., Any]) -> dict[str, Any]:
    _, first = create_key("developer", name="pusher", rate=None)
    _, second = create_key("developer", name="other-pusher", rate=None)
    return {"server": live_server(), "keys": [first, second]}


def _headers(secret: str, idempotency_key: str | None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {secret}"}
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    return headers


def _rows_per_version(name: str) -> list[int]:
    try:
        return [v.num_rows for v in list_versions(name)]
    except NotFoundError:
        return []  # the push has not made the dataset yet


def _wait_for(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_push_whose_connection_drops_after_its_commit_is_not_duplicated(
    server: dict[str, Any],
) -> None:
    """STAND-IN for a network that drops the answer: a raw socket sends the whole push, waits
    until its version is committed, and hangs up without reading the answer."""
    live, secret = server["server"], server["keys"][0]
    body = json.dumps({"records": [{"device": "d1", "temp": 20.5}], "flush": True}).encode()
    head = (
        "POST /v1/datasets/drop_sensors/records HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{live.port}\r\nAuthorization: Bearer {secret}\r\n"
        "Idempotency-Key: push-7f3a\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", live.port), timeout=60) as sock:
        sock.sendall(head + body)
        _wait_for(lambda: bool(_rows_per_version("drop_sensors")), "the first push's version")
    # The client never saw an answer, so it retries with the same key until one comes back.
    url = f"{live.url}/v1/datasets/drop_sensors/records"
    deadline = time.monotonic() + 60
    while True:
        retry = live_http.post(url, content=body, headers=_headers(secret, "push-7f3a"))
        if retry.status_code != 409 or time.monotonic() > deadline:
            break  # 409: the first push is still being answered
        time.sleep(0.05)
    assert retry.status_code in (200, 202), retry.text
    assert retry.headers.get("idempotent-replayed") == "true"
    assert retry.json()["accepted"] == 1
    assert _rows_per_version("drop_sensors") == [1]


def test_a_retry_gets_the_first_answer_and_lands_nothing(server: dict[str, Any]) -> None:
    url = f"{server['server'].url}/v1/datasets/retry_sensors/records"
    secret = server["keys"][0]
    body = {"records": [{"device": "d1", "temp": 20.5}, {"device": "d2", "temp": 21.0}]}
    first = live_http.post(url, json=body, headers=_headers(secret, "batch-0001"))
    assert first.status_code == 200, first.text
    assert first.json()["pending_rows"] == 2 and "idempotent-replayed" not in first.headers
    again = live_http.post(url, json=body, headers=_headers(secret, "batch-0001"))
    assert again.status_code == first.status_code
    assert again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"
    fresh = live_http.post(url, json=body, headers=_headers(secret, "batch-0002"))
    assert fresh.json()["pending_rows"] == 4  # the replay landed nothing
    plain = live_http.post(url, json=body, headers=_headers(secret, None))
    assert plain.json()["pending_rows"] == 6  # no key: every push lands


def test_a_key_reused_for_another_body_is_refused_and_keys_are_per_api_key(
    server: dict[str, Any],
) -> None:
    url = f"{server['server'].url}/v1/datasets/reuse_sensors/records"
    mine, theirs = server["keys"]
    one = {"records": [{"device": "d1", "temp": 1.0}]}
    other = {"records": [{"device": "d1", "temp": 2.0}]}
    assert live_http.post(url, json=one, headers=_headers(mine, "k-1")).status_code == 200
    reused = live_http.post(url, json=other, headers=_headers(mine, "k-1"))
    assert reused.status_code == 422
    assert "Idempotency-Key" in reused.json()["error"]["message"]
    # Another API key's Idempotency-Key space is its own: the same string is a new push.
    separate = live_http.post(url, json=other, headers=_headers(theirs, "k-1"))
    assert separate.status_code == 200 and "idempotent-replayed" not in separate.headers
    assert separate.json()["pending_rows"] == 2
    too_long = live_http.post(url, json=one, headers=_headers(mine, "k" * 256))
    assert too_long.status_code == 400
    assert "Idempotency-Key" in too_long.json()["error"]["message"]
