"""Issue 23 item 3 and issue 19 item 14 against a live server.

Request metrics carry the deployment that answered; the exported rules, their promtool tests and
the dashboard name only series and labels a live ``/metrics`` has; an unauthenticated scraper
sees aggregates only (no key ids, no deployment names); the scrape token or a ``read`` key sees
every series. A builtin embedder is the deployment (no training needed).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests import live_http

from aifab.inference.deployments import create_deployment
from aifab.ops.export_rules import label_mismatches
from aifab.ops.rule_tests import input_series
from aifab.serve.keys import create_key

pytestmark = pytest.mark.integration
TOKEN = "scrape-token-for-tests"


@pytest.fixture(autouse=True)
def workspace(module_workspace: Path) -> Path:
    return module_workspace


@pytest.fixture(scope="module")
def env(module_workspace: Path, live_server: Callable[..., Any]) -> Iterator[dict[str, Any]]:
    mp = pytest.MonkeyPatch()
    mp.setenv("AIFAB_METRICS_TOKEN", TOKEN)  # read per request: the server sees it
    create_deployment("builtin:all-minilm-l6-v2", name="minilm")
    keys = {
        role: create_key(role, name=f"m-{role}", rate=None)
        for role in ("client", "viewer", "admin")
    }
    server = live_server(reconcile_interval_s=0.2)
    url = server.url
    client = {"Authorization": f"Bearer {keys['client'][1]}"}
    ok = live_http.post(
        f"{url}/v1/embeddings", json={"model": "minilm", "input": "hi"}, headers=client, timeout=60
    )
    assert ok.status_code == 200, ok.text
    bad = live_http.post(
        f"{url}/v1/embeddings", json={"model": "minilm", "input": []}, headers=client
    )
    assert bad.status_code == 400, bad.text
    live_http.get(f"{url}/v1/keys")  # a 401: no deployment reached
    yield {"url": url, "keys": keys}
    mp.undo()


def _scrape(env: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    return live_http.get(f"{env['url']}/metrics", headers=headers or {}, timeout=30)


def _labels_of(text: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def test_request_metrics_carry_the_deployment(env: dict[str, Any]) -> None:
    text = _scrape(env, {"Authorization": f"Bearer {TOKEN}"}).text
    requests = [
        s
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "aifab_requests_total"
    ]
    by = {(s.labels["route"], s.labels["status"], s.labels["deployment"]) for s in requests}
    assert ("/v1/embeddings", "200", "minilm") in by
    assert ("/v1/keys", "401", "") in by  # no deployment: an empty label, not a guess


def test_exported_queries_match_a_live_scrape(env: dict[str, Any]) -> None:
    """Every rule and panel names series and labels the server exports (monitor metrics are
    the ops collector's, checked where a monitor runs: test_ops_monitoring)."""
    labels_of = _labels_of(_scrape(env, {"Authorization": f"Bearer {TOKEN}"}).text)
    problems = [p for p in label_mismatches(labels_of) if "aifab_monitor" not in p]
    problems = [p for p in problems if "aifab_alerts_firing" not in p]
    assert problems == []
    # the promtool tests' input series have the label names the server gives those series
    for series in input_series():
        name, _, body = series.partition("{")
        if name in labels_of:
            assert set(re.findall(r"([a-z_]+)=\"", body)) == labels_of[name], series


def test_an_unauthenticated_scrape_names_no_key_or_deployment(env: dict[str, Any]) -> None:
    """Issue 19 item 14: ``GET /metrics`` without a key listed key ids and deployment names."""
    r = _scrape(env)
    assert r.status_code == 200
    for record, _ in env["keys"].values():
        assert record["id"] not in r.text
    assert "minilm" not in r.text
    samples = {
        (s.name, tuple(sorted(s.labels.items())))
        for fam in text_string_to_metric_families(r.text)
        for s in fam.samples
    }
    # aggregates stay: requests by route and status, summed over deployments
    assert (
        "aifab_requests_total",
        (("method", "POST"), ("route", "/v1/embeddings"), ("status", "200")),
    ) in samples
    assert any(name == "process_resident_memory_bytes" for name, _ in samples)


def test_the_scrape_token_or_a_read_key_sees_every_series(env: dict[str, Any]) -> None:
    client_id = env["keys"]["client"][0]["id"]
    for secret in (TOKEN, env["keys"]["viewer"][1], env["keys"]["admin"][1]):
        r = _scrape(env, {"Authorization": f"Bearer {secret}"})
        assert r.status_code == 200 and 'deployment="minilm"' in r.text
        assert client_id in r.text
    wrong = _scrape(env, {"Authorization": "Bearer not-the-token"})
    assert wrong.status_code == 401 and wrong.json()["error"]["type"] == "authentication_error"
    denied = _scrape(env, {"Authorization": f"Bearer {env['keys']['client'][1]}"})
    assert denied.status_code == 403
