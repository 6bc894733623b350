"""Batch sizes read back from the server's own Prometheus histogram, per deployment."""

from __future__ import annotations

from aifab.serve.metrics import Metrics


def test_batch_sizes_per_bucket_of_one_deployment() -> None:
    metrics = Metrics()
    for size in (1, 1, 3, 4, 8, 700, 5000):
        metrics.observe_batch("a", size)
    metrics.observe_batch("b", 2)
    expected = [("1", 2), ("3-4", 2), ("5-8", 1), ("513-1024", 1), (">1024", 1)]
    assert metrics.batch_sizes("a") == expected
    assert metrics.batch_sizes("b") == [("2", 1)]
    assert metrics.batch_sizes("none") == []
