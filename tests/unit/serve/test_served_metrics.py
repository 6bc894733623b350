"""Canary routing of a served deployment, and the server's Prometheus metrics."""

from __future__ import annotations

import asyncio
from collections import Counter

from prometheus_client.parser import text_string_to_metric_families

from aifab.inference.batcher import Batcher
from aifab.serve.manager import Served, Target
from aifab.serve.metrics import Metrics


def _served(weight: float, sticky: str | None = None) -> Served:
    batcher = Batcher(lambda items: items)
    primary = Target(model="m@1", handler=None, batcher=batcher, role="primary")
    canary = Target(model="m@2", handler=None, batcher=batcher, role="canary")
    return Served("d", "classifier", primary, canary, canary_weight=weight, sticky_header=sticky)


def test_canary_weight_splits_traffic() -> None:
    counts = Counter(_served(10).pick({}).model for _ in range(5000))
    assert 300 < counts["m@2"] < 700  # ~10%
    assert Counter(_served(0).pick({}).model for _ in range(200)) == {"m@1": 200}
    assert Counter(_served(100).pick({}).model for _ in range(200)) == {"m@2": 200}


def test_sticky_header_pins_a_caller_to_one_version() -> None:
    served = _served(50, sticky="X-User")
    for user in (f"user-{i}" for i in range(50)):
        assert len({served.pick({"X-User": user}).model for _ in range(20)}) == 1
    picks = Counter(served.pick({"X-User": f"user-{i}"}).model for i in range(2000))
    assert 800 < picks["m@2"] < 1200  # the hash spreads callers by the weight
    assert {served.pick({}).model for _ in range(200)} == {"m@1", "m@2"}  # no header: random


def test_served_targets_and_batcher_roundtrip() -> None:
    served = _served(50)
    assert [t.role for t in served.targets()] == ["primary", "canary"]

    async def go() -> list[int]:
        out = await served.primary.batcher.submit([1, 2, 3])
        await served.primary.batcher.close()
        return out

    assert asyncio.run(go()) == [1, 2, 3]


def test_metrics_render_parses() -> None:
    m = Metrics()
    m.observe_request("d", "/v1/predict/{deployment}", 200, "k1", 0.004)
    m.observe_request("d", "/v1/predict/{deployment}", 422, "k1", 0.001)
    m.observe_batch("d", 5)
    m.add_tokens("d", "k1", prompt=7, completion=3)
    m.set_ready("d", True)
    fams = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    reqs = {
        s.labels["status"]: s.value
        for s in fams["aifab_deployment_requests"].samples
        if s.name == "aifab_deployment_requests_total"
    }
    assert reqs == {"200": 1.0, "422": 1.0}
    tokens = {
        s.labels["kind"]: s.value
        for s in fams["aifab_tokens"].samples
        if s.name == "aifab_tokens_total"
    }
    assert tokens == {"prompt": 7.0, "completion": 3.0}
    batch = {s.name: s.value for s in fams["aifab_batch_size"].samples}
    assert batch["aifab_batch_size_sum"] == 5.0
    assert fams["aifab_deployment_ready"].samples[0].value == 1.0
    # Another app's metrics are separate (own registry).
    assert b"aifab_deployment_requests_total{" not in Metrics().render()


def test_every_response_is_counted_by_route_method_and_status() -> None:
    m = Metrics()
    m.observe_response("/v1/keys", "POST", 401, 0.001)
    m.observe_response("/v1/keys", "POST", 201, 0.002)
    m.observe_token("lm", 0.05, first=True)
    m.observe_token("lm", 0.01, first=False)
    fams = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    reqs = {
        (s.labels["route"], s.labels["method"], s.labels["status"]): s.value
        for s in fams["aifab_requests"].samples
    }
    assert reqs == {("/v1/keys", "POST", "401"): 1.0, ("/v1/keys", "POST", "201"): 1.0}
    errors = [(s.labels["status"], s.value) for s in fams["aifab_errors"].samples]
    assert errors == [("401", 1.0)]
    assert fams["aifab_time_to_first_token_seconds"].samples
    assert fams["aifab_inter_token_latency_seconds"].samples
    assert "process_resident_memory_bytes" in fams
    assert not any(s.name.endswith("_created") for f in fams.values() for s in f.samples)


def test_dropped_request_log_entries_reach_metrics(monkeypatch) -> None:
    from fastapi.testclient import TestClient

    from aifab.inference import request_log
    from aifab.serve.app import create_app

    monkeypatch.setattr(request_log, "MAX_QUEUED", 0)  # a writer that is always behind
    app = create_app()
    with TestClient(app) as client:
        for _ in range(3):
            app.state.request_log.log({"deployment": "d", "status": 200})
        text = client.get("/metrics").text
    [value] = [
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "aifab_request_log_dropped_total"
    ]
    assert value == 3
