"""Deployment traffic read back from the request log: summaries and series in time buckets."""

from __future__ import annotations

import pytest

from aifab.core.errors import InvalidInputError
from aifab.inference.request_log import RequestLogger
from aifab.inference.traffic import traffic_by_model, traffic_series, traffic_summary

NOW = 1_700_000_000.0


def _log(entries: list[tuple[str, float, int, float]], model: str | None = None) -> None:
    """Write (deployment, seconds before NOW, status, latency ms) through the real logger."""
    logger = RequestLogger()
    for name, ago, status, latency in entries:
        logger.log({"ts": NOW - ago, "deployment": name, "route": "/v1/predict/{deployment}",
                    "status": status, "latency_ms": latency, "model_version": model})  # fmt: skip
    logger.close()


def test_summary_per_deployment_over_the_window() -> None:
    _log(
        [("a", 10, 200, float(ms)) for ms in range(1, 101)]
        + [("a", 20, 500, 1000.0), ("b", 30, 200, 5.0), ("a", 400, 200, 9999.0)]
    )
    out = traffic_summary(300, now=NOW)
    assert set(out) == {"a", "b"}
    a = out["a"]
    assert a["requests"] == 101 and a["errors"] == 1
    assert a["rate_per_s"] == pytest.approx(101 / 300)
    assert a["error_rate"] == pytest.approx(1 / 101)
    assert a["p50_ms"] == pytest.approx(51.0)
    assert 99 < a["p99_ms"] < 1000  # the 400 s old 9,999 ms request is outside the window
    assert out["b"]["requests"] == 1 and out["b"]["errors"] == 0
    assert traffic_summary(300, now=NOW + 10_000) == {}


def test_series_buckets_requests_errors_and_percentiles() -> None:
    _log(
        [("s", 50, 200, 10.0), ("s", 40, 200, 30.0), ("s", 45, 404, 20.0)]  # bucket 0: 60-30 s ago
        + [("s", 5, 200, 7.0)]  # bucket 1: the last 30 s
        + [("other", 5, 200, 1.0), ("s", 100, 200, 1.0)]  # another deployment; too old
    )
    series = traffic_series("s", window_s=60, bucket_s=30, now=NOW)
    assert series["ts"] == [NOW - 60, NOW - 30]
    assert series["requests"] == [3, 1]
    assert series["errors"] == [1, 0]
    assert series["p50_ms"] == [20.0, 7.0]
    assert series["p99_ms"][0] == pytest.approx(29.8)


def test_empty_buckets_have_no_percentiles() -> None:
    series = traffic_series("nobody", window_s=120, bucket_s=60, now=NOW)
    assert series["requests"] == [0, 0] and series["p50_ms"] == [None, None]


@pytest.mark.parametrize(
    ("window_s", "bucket_s"), [(60, 0.5), (30, 60), (8 * 86400, 3600), (10_000, 1)]
)
def test_bad_windows_are_named(window_s: float, bucket_s: float) -> None:
    with pytest.raises(InvalidInputError, match="window"):
        traffic_series("s", window_s=window_s, bucket_s=bucket_s)
    if window_s > 7 * 86400:
        with pytest.raises(InvalidInputError, match="window"):
            traffic_summary(window_s)


def test_by_model_shows_the_real_split_of_primary_and_canary() -> None:
    _log([("split", 10, 200, 5.0)] * 30, model="m@1")
    _log([("split", 10, 200, 9.0)] * 9 + [("split", 10, 500, 9.0)], model="m@2")
    _log([("split", 10, 404, 1.0)])  # refused before a model was picked
    _log([("split", 5000, 200, 1.0)], model="m@3")  # outside the window
    out = traffic_by_model("split", 3600, now=NOW)
    assert set(out) == {"m@1", "m@2", "-"}
    assert out["m@1"]["requests"] == 30 and out["m@1"]["share"] == 30 / 41
    assert out["m@2"]["errors"] == 1 and out["m@2"]["p50_ms"] == 9.0
    assert out["-"]["requests"] == 1
    assert traffic_by_model("nobody", now=NOW) == {}
    with pytest.raises(InvalidInputError, match="window"):
        traffic_by_model("split", 0)


def test_a_window_over_the_row_cap_is_sampled_evenly_and_scaled() -> None:
    # Found by bench/ui.py: the deployment page read up to 50k rows three times per view, so a
    # busy hour made it slow; beyond MAX_ROWS an even sample is read and counts are scaled.
    from sqlalchemy import insert

    from aifab.core.db import session_scope
    from aifab.inference import traffic
    from aifab.inference.tables import RequestLogRow

    n = traffic.MAX_ROWS * 3
    rows = [
        {"ts": NOW - i % 3000, "deployment": "busy", "route": "/v1/predict/{deployment}",
         "status": 500 if i % 10 == 0 else 200, "latency_ms": float(i % 100), "tokens": 0}
        for i in range(n)
    ]  # fmt: skip
    with session_scope() as s:  # the logger's bounded queue would drop a burst this size
        s.execute(insert(RequestLogRow), rows)
    out = traffic_summary(3600, now=NOW)["busy"]
    assert out["requests"] == pytest.approx(n, rel=0.02)
    assert out["errors"] == pytest.approx(n / 10, rel=0.05)
    assert out["p50_ms"] == pytest.approx(49.5, abs=3)
    series = traffic_series("busy", window_s=3600, bucket_s=600, now=NOW)
    assert sum(series["requests"]) == pytest.approx(n, rel=0.02)
    rows, stride = traffic._rows("busy", NOW - 3600)
    assert stride == 3 and len(rows) <= traffic.MAX_ROWS


def test_one_window_read_gives_the_series_and_the_split_of_both_calls() -> None:
    from aifab.inference.traffic import traffic_window

    _log([("d", 30, 200, 4.0), ("d", 90, 500, 8.0)], model="m@1")
    _log([("d", 40, 200, 6.0)], model="m@2")
    both = traffic_window("d", window_s=300, bucket_s=60, now=NOW)
    assert both["series"] == traffic_series("d", window_s=300, bucket_s=60, now=NOW)
    assert both["by_model"] == traffic_by_model("d", 300, now=NOW)
    assert both["by_model"]["m@1"]["requests"] == 2 and both["by_model"]["m@2"]["errors"] == 0
