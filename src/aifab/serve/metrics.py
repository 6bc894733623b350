"""The server's Prometheus metrics: requests, latency, batch sizes, tokens and errors.

Every metric lives on the app's own registry (several apps in one process do not collide).
Label children are bound once per label tuple and cached: ``labels()`` costs a lock and a
dict lookup per call, which is measurable on the request path.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["LATENCY_BUCKETS", "Metrics"]

#: Seconds; dense below 50 ms, where a tabular model answers.
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.0075,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class Metrics:
    """The metrics of one server, with cached label children for the hot path."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "aifab_requests",
            "Requests answered, by deployment, route, HTTP status and API key id.",
            ["deployment", "route", "status", "key"],
            registry=r,
        )
        self.latency = Histogram(
            "aifab_request_latency_seconds",
            "Time from the route's start to the answer, by deployment and route.",
            ["deployment", "route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "aifab_batch_size",
            "Items per model call (dynamic batching packs several requests into one).",
            ["deployment"],
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "aifab_tokens",
            "Model tokens, by deployment, API key id and kind (prompt | completion).",
            ["deployment", "key", "kind"],
            registry=r,
        )
        self.errors = Counter(
            "aifab_errors",
            "Requests answered with an error status, by deployment, route and status code.",
            ["deployment", "route", "code"],
            registry=r,
        )
        self.ready = Gauge(
            "aifab_deployment_ready",
            "1 when the deployment is loaded and serving, else 0.",
            ["deployment"],
            registry=r,
        )
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def observe_request(
        self, deployment: str, route: str, status: int, key: str, latency_s: float
    ) -> None:
        """Count one answered request and its latency (errors counted separately too)."""
        code = str(status)
        self._child(self.requests, (deployment, route, code, key)).inc()
        self._child(self.latency, (deployment, route)).observe(latency_s)
        if status >= 400:
            self._child(self.errors, (deployment, route, code)).inc()

    def observe_batch(self, deployment: str, size: int) -> None:
        """Record the size of one model call."""
        self._child(self.batch_size, (deployment,)).observe(size)

    def add_tokens(self, deployment: str, key: str, prompt: int, completion: int) -> None:
        """Count prompt and completion tokens of one request."""
        if prompt:
            self._child(self.tokens, (deployment, key, "prompt")).inc(prompt)
        if completion:
            self._child(self.tokens, (deployment, key, "completion")).inc(completion)

    def set_ready(self, deployment: str, ready: bool) -> None:
        """Publish whether ``deployment`` is serving."""
        self._child(self.ready, (deployment,)).set(1.0 if ready else 0.0)

    def forget(self, deployment: str) -> None:
        """Drop the readiness gauge of a deleted deployment (counters keep their history)."""
        with contextlib.suppress(KeyError):
            self.ready.remove(deployment)
        self._children.pop((id(self.ready), deployment), None)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric.

        Under ``aifab serve --workers`` prometheus_client keeps the values of every process
        in files; they are added up here, whichever process answers.
        """
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)
