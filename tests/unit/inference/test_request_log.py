"""The sampled request log: background batched writes, sampling that keeps every error."""

from __future__ import annotations

import pytest

from aifab.core.errors import InvalidInputError
from aifab.inference.request_log import RequestLogger, recent_requests


def _entry(i: int, status: int = 200, deployment: str = "churn") -> dict[str, object]:
    return {
        "deployment": deployment,
        "model_version": "churn@1",
        "key_id": "key_1",
        "route": "/v1/predict/churn",
        "status": status,
        "latency_ms": 1.5 + i,
        "input": {"age": i},
        "output": {"label": "stay"},
        "tokens": 0,
    }


def test_entries_are_written_in_the_background_and_read_newest_first() -> None:
    logger = RequestLogger()
    for i in range(5):
        logger.log(_entry(i))
    logger.log(_entry(9, deployment="other"))
    logger.flush()
    rows = recent_requests()
    assert [r["deployment"] for r in rows] == ["other"] + ["churn"] * 5
    churn = recent_requests("churn", limit=2)
    assert [r["input"] for r in churn] == [{"age": 4}, {"age": 3}]
    first = churn[0]
    assert first["model_version"] == "churn@1" and first["key_id"] == "key_1"
    assert first["status"] == 200 and first["latency_ms"] == 5.5 and first["ts"] > 0
    assert first["output"] == {"label": "stay"} and first["route"] == "/v1/predict/churn"
    logger.close()


def test_sampling_keeps_every_error() -> None:
    logger = RequestLogger(sample_rate=0.0)
    for i in range(20):
        logger.log(_entry(i))
    logger.log(_entry(1, status=422))
    logger.log(_entry(2, status=500))
    logger.close()
    assert sorted(r["status"] for r in recent_requests()) == [422, 500]


def test_partial_sampling_keeps_some() -> None:
    logger = RequestLogger(sample_rate=0.5)
    for i in range(400):
        logger.log(_entry(i))
    logger.close()
    kept = len(recent_requests(limit=1000))
    assert 0 < kept < 400


def test_many_entries_are_all_written_in_batches() -> None:
    logger = RequestLogger(flush_interval_s=60)  # flush() must not wait for the interval
    for i in range(1200):
        logger.log(_entry(i))
    logger.flush()
    assert len(recent_requests(limit=10_000)) == 1200
    logger.close()


def test_odd_values_and_big_inputs_are_stored_safely() -> None:
    logger = RequestLogger()
    logger.log({**_entry(0), "input": {"text": "x" * 100_000}, "output": [0.1, 0.9]})
    logger.log({**_entry(1), "input": None, "output": {"when": object()}})
    logger.close()
    second, first = recent_requests()
    assert first["input"] == {"truncated": True, "bytes": pytest.approx(100_012, abs=10)}
    assert first["output"] == {"value": [0.1, 0.9]}
    assert second["input"] is None and isinstance(second["output"]["when"], str)


def test_after_close_entries_are_ignored() -> None:
    logger = RequestLogger()
    logger.close()
    logger.log(_entry(0))
    logger.flush()
    assert recent_requests() == []


def test_bad_arguments() -> None:
    with pytest.raises(InvalidInputError, match="sample_rate"):
        RequestLogger(sample_rate=1.5)
    with pytest.raises(InvalidInputError, match="limit"):
        recent_requests(limit=0)


def test_a_stalled_writer_drops_and_counts_instead_of_blocking(
    workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    from aifab.core.db import get_engine
    from aifab.inference import request_log

    get_engine()  # the schema exists
    monkeypatch.setattr(request_log, "MAX_QUEUED", 5)
    drops: list[int] = []
    logger = RequestLogger(flush_interval_s=0.01, on_drop=lambda: drops.append(1))
    # Another process's write transaction holds the DB: the writer cannot insert meanwhile.
    holder = sqlite3.connect(workspace / "aifab.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        for i in range(30):
            logger.log(_entry(i))
        # at most 5 queued and 5 taken by the (blocked) writer: the rest dropped at once
        assert logger.dropped >= 30 - 10
        assert len(drops) == logger.dropped
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    logger.close()
    assert len(recent_requests(limit=100)) == 30 - logger.dropped


def test_entries_not_sampled_in_are_never_built() -> None:
    logger = RequestLogger(sample_rate=0.0)
    assert not logger.wants(200) and logger.wants(500)
    logger.close()
    assert not logger.wants(500)  # closed: nothing is kept any more
