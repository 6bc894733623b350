"""The server's Prometheus metrics: requests, latency, batch sizes, tokens and errors.

Every response is counted by route template, method, status and deployment (the request guard
middleware sees all of them, 401s and 404s included; ``deployment`` is the one that answered,
empty on routes without one or when none was reached); model routes add per-key counts.
Unauthenticated scrapers see :meth:`Metrics.render` ``public=True``: no key ids, deployment,
monitor or rule names (see ``serve/routes/health.py``).
Every metric lives on the app's own registry (several apps in one process do not collide).
Label children are bound once per label tuple and cached: ``labels()`` costs a lock and a
dict lookup per call, which is measurable on the request path.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.metrics_core import Metric

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
#: Seconds between streamed tokens (and to the first one).
TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# Each counter's ``_created`` twin doubles the series and says nothing a scrape needs.
disable_created_metrics()


class Metrics:
    """The metrics of one server, with cached label children for the hot path."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "aifab_requests",
            "Every response, by route template, method, HTTP status and the deployment that "
            "answered (empty when none did).",
            ["route", "method", "status", "deployment"],
            registry=r,
        )
        self.errors = Counter(
            "aifab_errors",
            "Responses with a 4xx or 5xx status, by route template, method, HTTP status and "
            "deployment (empty when none answered).",
            ["route", "method", "status", "deployment"],
            registry=r,
        )
        self.duration = Histogram(
            "aifab_http_request_duration_seconds",
            "Time from a request's arrival to its answer, by route template and method.",
            ["route", "method"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "aifab_requests_in_flight", "Requests being answered now.", registry=r
        )
        self.deployment_requests = Counter(
            "aifab_deployment_requests",
            "Model requests answered, by deployment, route, HTTP status and API key id.",
            ["deployment", "route", "status", "key"],
            registry=r,
        )
        self.ttft = Histogram(
            "aifab_time_to_first_token_seconds",
            "Streamed completions: time from the request to its first token, by deployment.",
            ["deployment"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.inter_token = Histogram(
            "aifab_inter_token_latency_seconds",
            "Streamed completions: time between consecutive tokens, by deployment.",
            ["deployment"],
            buckets=TOKEN_BUCKETS,
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
        self.ready = Gauge(
            "aifab_deployment_ready",
            "1 when the deployment is loaded and serving, else 0.",
            ["deployment"],
            registry=r,
        )
        ProcessCollector(registry=r)
        r.register(PLATFORM_COLLECTOR)
        r.register(GC_COLLECTOR)
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, labels: tuple[str, ...]) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def observe_response(
        self, route: str, method: str, status: int, latency_s: float, deployment: str = ""
    ) -> None:
        """Count one HTTP response (any route, any status) and its duration.

        ``deployment`` is the deployment that answered (set by the route once it resolved one,
        so an unauthenticated caller cannot add label values), or empty.
        """
        code = str(status)
        self._child(self.requests, (route, method, code, deployment)).inc()
        self._child(self.duration, (route, method)).observe(latency_s)
        if status >= 400:
            self._child(self.errors, (route, method, code, deployment)).inc()

    def observe_request(
        self, deployment: str, route: str, status: int, key: str, latency_s: float
    ) -> None:
        """Count one model request by deployment and key, and its latency."""
        self._child(self.deployment_requests, (deployment, route, str(status), key)).inc()
        self._child(self.latency, (deployment, route)).observe(latency_s)

    def observe_token(self, deployment: str, gap_s: float, *, first: bool) -> None:
        """Record a streamed token: the time to the first one, or since the previous one."""
        self._child(self.ttft if first else self.inter_token, (deployment,)).observe(gap_s)

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

    def batch_sizes(self, deployment: str) -> list[tuple[str, int]]:
        """Model calls of ``deployment`` since the server started, by batch size bucket.

        Returns:
            ``[(bucket, calls)]`` in size order, buckets labelled ``"1"``, ``"2"``, ``"3-4"``...
            ``">1024"``; empty when the deployment has made no model call. Under ``--workers``
            the calls of every process are added up, as in :meth:`render`.
        """
        cumulative: list[tuple[float, float]] = []
        for family in self._collecting_registry().collect():
            if family.name != "aifab_batch_size":
                continue
            for sample in family.samples:
                if (
                    sample.name.endswith("_bucket")
                    and sample.labels.get("deployment") == deployment
                ):
                    cumulative.append((float(sample.labels["le"]), sample.value))
        cumulative.sort()
        out, seen, low = [], 0.0, 0.0
        for bound, total in cumulative:
            count = int(total - seen)
            seen = total
            if count:
                out.append((_bucket_label(low, bound), count))
            low = bound
        return out

    def _collecting_registry(self) -> CollectorRegistry:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return registry
        return self.registry

    def render(self, *, public: bool = False) -> bytes:
        """The Prometheus text exposition of every metric.

        Under ``aifab serve --workers`` prometheus_client keeps the values of every process
        in files; they are added up here, whichever process answers.

        Args:
            public: the view of an unauthenticated scraper: series are summed over the labels
                that name keys, deployments, monitors and rules; gauges that carry one (a
                value per name does not add up) are left out.
        """
        registry = self._collecting_registry()
        return generate_latest(_PublicView(registry) if public else registry)


#: Labels whose values name keys, deployments, monitors or alert rules.
PRIVATE_LABELS = frozenset({"key", "deployment", "monitor", "rule"})
_SUMMABLE = frozenset({"counter", "histogram", "summary"})


class _PublicView:
    """A registry's metrics without the labels an unauthenticated scraper may not read."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            if not any(PRIVATE_LABELS.intersection(s.labels) for s in family.samples):
                yield family
                continue
            if family.type not in _SUMMABLE:
                continue
            sums: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
            for sample in family.samples:
                kept = tuple((k, v) for k, v in sample.labels.items() if k not in PRIVATE_LABELS)
                sums[(sample.name, kept)] = sums.get((sample.name, kept), 0.0) + sample.value
            out = Metric(family.name, family.documentation, family.type, family.unit)
            for (name, labels), value in sums.items():
                out.add_sample(name, dict(labels), value)
            yield out


def _bucket_label(low: float, high: float) -> str:
    """``"1"``, ``"3-4"``, ``">1024"``: the batch sizes a histogram bucket (low, high] holds."""
    if high == float("inf"):
        return f">{int(low)}"
    first = int(low) + 1
    return str(int(high)) if first >= int(high) else f"{first}-{int(high)}"
