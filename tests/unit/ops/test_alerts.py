"""Alert rules (pure), the alert store, and the webhook sink against a real local receiver."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from aifab.core.errors import InvalidInputError
from aifab.ops import alert_history, list_alerts, silence_alerts
from aifab.ops.alert_rules import Breach, Rule, Silence, default_rules, evaluate, fingerprint, plan
from aifab.ops.alerts import process_breaches

SECRET = "s3cret-for-tests"


def test_evaluate_and_gate_on_labels() -> None:
    rules = default_rules(quality_min=0.8, min_labels=20, latency_p99_ms=50, error_rate=0.01)
    values = {"dataset_drift": 1.0, "accuracy": 0.5, "labelled": 5, "latency_p99_ms": 80.0}
    assert [b.rule for b in evaluate(rules, values)] == ["data_drift", "latency"]
    values["labelled"] = 25
    assert "quality" in [b.rule for b in evaluate(rules, values)]
    assert evaluate([Rule("r", "x", "<", 1.0)], {}) == []  # a missing value never fires


def test_plan_folds_repeats_resolves_and_mutes() -> None:
    b = Breach("data_drift", 1.0, 1.0, "warning", "m")
    fp = fingerprint("data_drift", "mon")
    p = plan("mon", [b], {}, [Silence("data_drift", None, 100.0)], now=50.0)
    assert p.fire == [(b, True)]
    p = plan("mon", [b], {}, [Silence("data_drift", None, 100.0)], now=150.0)
    assert p.fire == [(b, False)]
    p = plan("mon", [b], {fp: "data_drift"}, [], now=1.0)
    assert p.repeat == [(fp, b)] and not p.fire
    assert plan("mon", [], {fp: "data_drift"}, [], now=1.0).resolve == [fp]
    # a window that could not judge drift does not resolve the drift alert
    assert plan("mon", [], {fp: "data_drift"}, [], now=1.0, judged=["latency"]).resolve == []


class _Receiver(BaseHTTPRequestHandler):
    fail_first = 0
    delay_s = 0.0
    received: list[dict[str, Any]] = []
    calls = 0

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["content-length"]))
        type(self).calls += 1
        if type(self).delay_s:
            time.sleep(type(self).delay_s)
        if type(self).calls <= type(self).fail_first:
            self.send_response(500)
            self.end_headers()
            return
        ts = self.headers["x-aifab-timestamp"]
        want = (
            "sha256="
            + hmac.new(SECRET.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
        )
        ok = hmac.compare_digest(want, self.headers.get("x-aifab-signature", ""))
        type(self).received.append({"signature_ok": ok, "body": json.loads(body)})
        self.send_response(204 if ok else 401)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, type[_Receiver]]]:
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    handler = type("Recv", (_Receiver,), {"received": [], "calls": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", handler
    server.shutdown()
    server.server_close()


def _sink(url: str, **kw: Any) -> dict[str, Any]:
    return {"type": "webhook", "url": url, "secret_env": "HOOK_SECRET", "backoff_s": 0.01, **kw}


def test_webhook_gets_signed_grouped_alerts_once_and_resolution(receiver) -> None:
    url, recv = receiver
    drift = Breach("data_drift", 1.0, 1.0, "warning", "dataset_drift = 1")
    lat = Breach("latency", 90.0, 50.0, "warning", "latency_p99_ms = 90 > 50")
    fired = process_breaches("mon", "churn", [drift, lat], [_sink(url)])
    assert {a["rule"] for a in fired} == {"data_drift", "latency"}
    assert len(recv.received) == 1  # grouped: one notification for the deployment
    note = recv.received[0]
    assert note["signature_ok"] and note["body"]["group"] == "churn"
    assert {a["state"] for a in note["body"]["alerts"]} == {"firing"}
    assert process_breaches("mon", "churn", [drift, lat], [_sink(url)]) == []  # de-duplicated
    assert len(recv.received) == 1
    firing = list_alerts("firing")
    assert {a["count"] for a in firing} == {2}
    resolved = process_breaches("mon", "churn", [drift], [_sink(url)])
    assert [(a["rule"], a["state"]) for a in resolved] == [("latency", "resolved")]
    assert recv.received[-1]["body"]["alerts"][0]["state"] == "resolved"
    kinds = [e["event"] for e in alert_history()]
    assert kinds.count("delivered") == 3 and "repeated" in kinds and "resolved" in kinds


def test_webhook_500_is_retried_then_delivered(receiver) -> None:
    url, recv = receiver
    recv.fail_first = 2
    process_breaches("m2", "d", [Breach("errors", 0.5, 0.1, "critical", "x")], [_sink(url)])
    assert recv.calls == 3 and len(recv.received) == 1
    ev = [e for e in alert_history() if e["event"] == "delivered"]
    assert ev[0]["detail"]["attempts"] == 3


def test_webhook_that_keeps_failing_or_times_out_is_recorded_not_raised(receiver) -> None:
    url, recv = receiver
    recv.fail_first = 100
    process_breaches(
        "m3", "d", [Breach("errors", 0.5, 0.1, "critical", "x")], [_sink(url, retries=2)]
    )
    assert recv.calls == 3
    failed = [e for e in alert_history() if e["event"] == "delivery_failed"]
    assert failed[0]["detail"]["error"] == "HTTP 500" and failed[0]["detail"]["attempts"] == 3
    recv.fail_first, recv.delay_s = 0, 1.0
    process_breaches(
        "m4",
        "d",
        [Breach("errors", 0.5, 0.1, "critical", "x")],
        [_sink(url, retries=1, timeout_s=0.2)],
    )
    failed = [
        e for e in alert_history() if e["event"] == "delivery_failed" and e["monitor"] == "m4"
    ]
    assert "Timeout" in failed[0]["detail"]["error"]
    unreachable = _sink("http://127.0.0.1:9/nothing", retries=0)
    process_breaches("m5", "d", [Breach("errors", 0.5, 0.1, "critical", "x")], [unreachable])
    assert any(e["event"] == "delivery_failed" for e in alert_history() if e["monitor"] == "m5")


def test_silence_mutes_new_and_firing_alerts(receiver) -> None:
    url, recv = receiver
    b = Breach("data_drift", 1.0, 1.0, "warning", "x")
    process_breaches("mon", "churn", [b], [_sink(url)])
    silence_alerts(monitor="mon", duration_s=3600, reason="known migration")
    assert list_alerts("firing")[0]["silenced"] is True
    process_breaches("mon", "churn", [], [_sink(url)])  # resolution of a muted alert: no notice
    process_breaches("mon", "churn", [b], [_sink(url)])  # new alert under the silence
    assert len(recv.received) == 1
    with pytest.raises(InvalidInputError, match="--rule and/or --monitor"):
        silence_alerts(duration_s=60)


def test_plan_renotifies_a_firing_alert_after_its_interval_only() -> None:
    b = Breach("data_drift", 1.0, 1.0, "warning", "m")
    fp = fingerprint("data_drift", "mon")
    firing = {fp: "data_drift"}

    def renotify(now: float, interval: float | None) -> list[str]:
        p = plan(
            "mon",
            [b],
            firing,
            [],
            now,
            last_sent={fp: 100.0},
            repeat_after={"data_drift": interval},
        )
        assert p.repeat == [(fp, b)] and not p.fire  # still de-duplicated: no second alert
        return p.renotify

    assert renotify(159.0, 60.0) == []
    assert renotify(160.0, 60.0) == [fp]
    assert renotify(10_000.0, None) == []  # no interval: never re-sent


def test_still_firing_alert_is_resent_after_repeat_interval_not_before(receiver) -> None:
    from aifab.ops.monitors import create_monitor

    url, recv = receiver
    spec = {
        "deployment": "churn",
        "sinks": [_sink(url)],
        "repeat_interval_s": 3.0,
        "repeat_intervals": {"latency": 3600},  # a rule of its own: not within this test
    }
    create_monitor("watch", spec)
    drift = Breach("data_drift", 1.0, 1.0, "warning", "dataset_drift = 1")
    lat = Breach("latency", 90.0, 50.0, "warning", "latency_p99_ms = 90 > 50")
    started = time.monotonic()
    assert len(process_breaches("watch", "churn", [drift, lat], [_sink(url)])) == 2
    assert process_breaches("watch", "churn", [drift, lat], [_sink(url)]) == []
    assert time.monotonic() - started < 3.0, "the machine was too slow to check 'not before'"
    assert len(recv.received) == 1
    time.sleep(3.1)
    again = process_breaches("watch", "churn", [drift, lat], [_sink(url)])
    assert [(a["rule"], a["state"], a["renotified"]) for a in again] == [
        ("data_drift", "firing", True)
    ]
    assert len(recv.received) == 2 and recv.received[1]["signature_ok"]
    [note] = recv.received[1]["body"]["alerts"]
    assert (note["rule"], note["renotified"], note["count"]) == ("data_drift", True, 3)
    # the interval restarts at the re-sent notice: the next evaluation only folds in
    assert process_breaches("watch", "churn", [drift, lat], [_sink(url)]) == []
    assert len(recv.received) == 2
    assert len(list_alerts("firing")) == 2  # still one alert per rule
    kinds = [e["event"] for e in alert_history() if e["rule"] == "data_drift"]
    assert kinds.count("renotified") == 1 and kinds.count("fired") == 1


def test_silenced_alert_is_not_resent(receiver) -> None:
    from aifab.ops.monitors import create_monitor

    url, recv = receiver
    create_monitor("quiet", {"deployment": "d", "sinks": [_sink(url)], "repeat_interval_s": 0.1})
    b = Breach("errors", 0.5, 0.1, "critical", "x")
    process_breaches("quiet", "d", [b], [_sink(url)])
    silence_alerts(monitor="quiet", duration_s=3600)
    time.sleep(0.2)
    assert process_breaches("quiet", "d", [b], [_sink(url)]) == []
    assert len(recv.received) == 1


def test_bad_repeat_interval_is_refused_naming_it() -> None:
    from aifab.ops.monitors import create_monitor

    with pytest.raises(InvalidInputError, match="repeat_interval"):
        create_monitor("bad", {"deployment": "d", "repeat_interval_s": 0})
    with pytest.raises(InvalidInputError, match="repeat_intervals.*'latency'"):
        create_monitor("bad", {"deployment": "d", "repeat_intervals": {"latency": -5}})
