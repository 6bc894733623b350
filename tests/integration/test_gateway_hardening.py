"""Hostile requests against a real uvicorn server (issue 9): bodies refused before they are read,
deep JSON, absurd rates, and metrics that count every response."""

from __future__ import annotations

import json
import select
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests import live_http

from aifab.inference.deployments import create_deployment, list_deployments
from aifab.serve.keys import create_key

pytestmark = pytest.mark.integration

_MIB = 1024 * 1024
_CHUNK = b"x" * _MIB


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def env(
    churn_model: dict[str, Any], module_workspace: Path, live_server: Callable[..., Any]
) -> Iterator[dict[str, Any]]:
    if "churn" not in {d["name"] for d in list_deployments()}:
        create_deployment("churn@champion", name="churn")
    keys = {}
    for role in ("admin", "developer", "viewer", "client"):
        record, secret = create_key(role, name=f"hard-{role}", rate=None)
        keys[role] = {"id": record["id"], "secret": secret}
    record, secret = create_key("client", name="metered", rate="600/min", token_quota=1000)
    keys["metered"] = {"id": record["id"], "secret": secret}
    server = live_server(reconcile_interval_s=0.2)
    yield {"url": server.url, "port": server.port, "keys": keys, "one": one_record()}


def auth(env: dict[str, Any], role: str = "client") -> dict[str, str]:
    return {"Authorization": f"Bearer {env['keys'][role]['secret']}"}


def rss_bytes() -> int:
    """This process's resident memory (the live server runs in it, on a thread)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def raw_post(
    port: int, path: str, headers: dict[str, str], total: int, *, chunked: bool = False
) -> int:
    """POST ``total`` bytes of body, 1 MiB at a time, stopping when the server answers.

    Returns:
        The HTTP status the server answered (before or after the body was all sent).
    """
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}")
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        sent = 0
        try:
            while sent < total and not select.select([sock], [], [], 0)[0]:
                frame = b"%x\r\n%s\r\n" % (len(_CHUNK), _CHUNK) if chunked else _CHUNK
                sock.sendall(frame)
                sent += len(_CHUNK)
            if chunked and sent >= total:
                sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed: read what it said
        reply = b""
        while b"\r\n" not in reply:
            data = sock.recv(65536)
            if not data:
                break
            reply += data
    return int(reply.split(b" ", 2)[1])


def test_big_unauthenticated_body_is_refused_unread(env: dict[str, Any]) -> None:
    before = rss_bytes()
    for path in ("/v1/keys", "/v1/deployments", "/v1/datasets/x/records", "/v1/predict/churn"):
        assert raw_post(env["port"], path, {}, 100 * _MIB) == 401, path
    # A key of the wrong role is refused (403) before its body too.
    assert raw_post(env["port"], "/v1/keys", auth(env, "client"), 100 * _MIB) == 403
    assert rss_bytes() - before < 50 * _MIB


def test_content_length_over_the_route_cap_is_413(env: dict[str, Any]) -> None:
    before = rss_bytes()
    assert raw_post(env["port"], "/v1/predict/churn", auth(env), 100 * _MIB) == 413
    r = live_http.post(
        f"{env['url']}/v1/keys", content=b"{" * (128 * 1024), headers=auth(env, "admin")
    )
    assert r.status_code == 413
    assert "limit of 65536 bytes" in r.json()["error"]["message"]
    assert rss_bytes() - before < 50 * _MIB


def test_big_chunked_body_is_cut_at_the_cap(env: dict[str, Any]) -> None:
    before = rss_bytes()
    status = raw_post(env["port"], "/v1/predict/churn", auth(env), 100 * _MIB, chunked=True)
    assert status == 413
    assert rss_bytes() - before < 50 * _MIB
    status = raw_post(env["port"], "/v1/keys", auth(env, "admin"), 8 * _MIB, chunked=True)
    assert status == 413


def test_deeply_nested_json_to_predict_is_a_400(env: dict[str, Any]) -> None:
    body = b'{"records": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    r = live_http.post(f"{env['url']}/v1/predict/churn", content=body, headers=auth(env))
    assert r.status_code == 400, r.text
    assert "nested too deeply" in r.json()["error"]["message"]


def test_an_infinite_rate_is_refused_over_http(env: dict[str, Any]) -> None:
    r = live_http.post(
        f"{env['url']}/v1/keys",
        json={"role": "client", "rate": "1e308/s"},
        headers=auth(env, "admin"),
    )
    assert r.status_code == 422, r.text
    assert "rate" in r.json()["error"]["message"]


def _counts(env: dict[str, Any], family: str) -> dict[tuple[str, str, str], float]:
    text = live_http.get(f"{env['url']}/metrics").text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    counts: dict[tuple[str, str, str], float] = {}
    for s in fams[family].samples:  # the open view: summed over deployments already
        if s.name == f"{family}_total":
            label = (s.labels["route"], s.labels["method"], s.labels["status"])
            counts[label] = counts.get(label, 0.0) + s.value
    return counts


def test_every_error_kind_reaches_the_metrics(env: dict[str, Any]) -> None:
    url = env["url"]
    before = _counts(env, "aifab_requests")
    live_http.get(f"{url}/v1/keys")  # 401
    live_http.get(f"{url}/v1/keys", headers=auth(env, "client"))  # 403
    live_http.get(f"{url}/no/such/route")  # 404
    bad_json = {**auth(env, "admin"), "Content-Type": "application/json"}
    assert live_http.post(f"{url}/v1/keys", content=b"{nope", headers=bad_json).status_code == 400
    assert live_http.post(f"{url}/v1/keys", json={}, headers=auth(env, "admin")).status_code == 422
    after = _counts(env, "aifab_requests")
    errors = _counts(env, "aifab_errors")
    for label in (
        ("/v1/keys", "GET", "401"),
        ("/v1/keys", "GET", "403"),
        ("unmatched", "GET", "404"),
        ("/v1/keys", "POST", "400"),
        ("/v1/keys", "POST", "422"),
    ):
        assert after.get(label, 0) - before.get(label, 0) == 1, label
        assert errors.get(label, 0) >= 1, label
    text = live_http.get(f"{url}/metrics").text
    assert "_created" not in text
    assert "process_resident_memory_bytes" in text
    assert "aifab_requests_in_flight" in text
    assert "aifab_time_to_first_token_seconds" in text or "aifab_time_to_first_token" in text


def test_success_carries_rate_limit_headers(env: dict[str, Any]) -> None:
    r = live_http.post(
        f"{env['url']}/v1/predict/churn", json=env["one"], headers=auth(env, "metered")
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-ratelimit-limit-requests"] == "600"
    assert 0 <= int(r.headers["x-ratelimit-remaining-requests"]) <= 600  # a minute's burst
    assert r.headers["x-ratelimit-reset-requests"].endswith("s")
    assert r.headers["x-ratelimit-limit-tokens"] == "1000"
    assert int(r.headers["x-ratelimit-remaining-tokens"]) <= 1000
    denied = live_http.get(f"{env['url']}/v1/keys", headers=auth(env, "metered"))
    assert "x-ratelimit-limit-requests" not in denied.headers


def one_record() -> dict[str, Any]:
    """One row of the churn model's training data, as a client would send it."""
    from aifab.data.catalog import resolve
    from aifab.inference.loading import load_served_model
    from aifab.models.checkpoint import read_sidecar
    from aifab.track.registry import download_model
    from aifab.train.datasets import read_table

    ref = read_sidecar(download_model("churn@1"))["meta"]["datasets"][0]["ref"]
    columns = list(load_served_model("churn@1").handler.input_columns)
    row = read_table(resolve(ref)).to_pylist()[0]
    return {"records": [json.loads(json.dumps({c: row[c] for c in columns}, default=str))]}


def test_client_keys_push_only_to_granted_datasets(env: dict[str, Any]) -> None:
    record, secret = create_key("client", name="sensors-only", rate=None, datasets="sensors*")
    granted = {"Authorization": f"Bearer {secret}"}
    body = {"records": [{"device": "d1", "temp": 20.5}]}
    url = env["url"]
    r = live_http.post(f"{url}/v1/datasets/sensors_hall/records", json=body, headers=granted)
    assert r.status_code == 200, r.text
    r = live_http.post(f"{url}/v1/datasets/payroll/records", json=body, headers=granted)
    assert r.status_code == 403
    assert "may not push to dataset 'payroll'" in r.json()["error"]["message"]
    # A client key without grants pushes nowhere; a developer key anywhere.
    r = live_http.post(f"{url}/v1/datasets/sensors_hall/records", json=body, headers=auth(env))
    assert r.status_code == 403
    r = live_http.post(
        f"{url}/v1/datasets/payroll/records", json=body, headers=auth(env, "developer")
    )
    assert r.status_code == 200, r.text
    # Grants over HTTP, listed with the key.
    r = live_http.post(
        f"{url}/v1/keys",
        json={"role": "client", "datasets": ["events", "iot*"]},
        headers=auth(env, "admin"),
    )
    assert r.status_code == 201 and r.json()["datasets"] == ["events", "iot*"]
    r = live_http.post(
        f"{url}/v1/keys", json={"role": "client", "datasets": "x\n"}, headers=auth(env, "admin")
    )
    assert r.status_code == 422


def test_deploy_loads_directories_under_the_model_roots_only(env: dict[str, Any]) -> None:
    url = f"{env['url']}/v1/deployments"
    answers = {}
    for source in ("/etc", "/no/such/dir", "~", "../../../../tmp"):
        r = live_http.post(
            url, json={"model": source, "name": "probe"}, headers=auth(env, "developer")
        )
        assert r.status_code == 422, r.text
        answers[source] = r.json()["error"]["message"].replace(repr(source), "SOURCE")
    assert len(set(answers.values())) == 1, answers  # existing or not: the same answer
    message = next(iter(answers.values()))
    assert "model roots" in message and str(Path.home()) not in message
    assert "probe" not in {d["name"] for d in list_deployments()}


def test_a_push_wider_than_the_column_cap_is_refused_at_once(env: dict[str, Any]) -> None:
    wide = {"records": [{f"c{i}": i for i in range(20_000)}]}
    r = live_http.post(
        f"{env['url']}/v1/datasets/wide/records",
        json=wide,
        headers=auth(env, "developer"),
        timeout=30,
    )
    assert r.status_code == 422, r.text
    message = r.json()["error"]["message"]
    assert "20000 columns" in message and "AIFAB_MAX_COLUMNS" in message
    ok = {"records": [{f"c{i}": i for i in range(20)}], "flush": True}
    r = live_http.post(
        f"{env['url']}/v1/datasets/narrow/records", json=ok, headers=auth(env, "developer")
    )
    assert r.status_code == 200 and r.json()["version"] == "narrow@1", r.text
