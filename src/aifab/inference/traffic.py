"""Traffic of deployments from the request log: request rate, latency percentiles, errors.

Read by the dashboard (and anyone watching a deployment). The log is sampled by
``aifab serve --log-sample``: counts are of logged requests, and every error is logged. Queries
read a bounded number of the newest rows, so a busy log never makes a page slow.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from sqlalchemy import select

from aifab.core.db import session_scope
from aifab.core.errors import InvalidInputError
from aifab.inference.tables import RequestLogRow

__all__ = ["traffic_by_model", "traffic_series", "traffic_summary"]

#: The most log rows one query reads (newest first).
MAX_ROWS = 50_000


def _rows(deployment: str | None, since: float) -> list[tuple[str, float, int, float]]:
    q = (
        select(
            RequestLogRow.deployment,
            RequestLogRow.ts,
            RequestLogRow.status,
            RequestLogRow.latency_ms,
        )
        .where(RequestLogRow.ts >= since)
        .order_by(RequestLogRow.id.desc())
        .limit(MAX_ROWS)
    )
    if deployment is not None:
        q = q.where(RequestLogRow.deployment == deployment)
    with session_scope() as s:
        return [tuple(r) for r in s.execute(q)]  # type: ignore[misc]


def _stats(latencies: np.ndarray, statuses: np.ndarray, seconds: float) -> dict[str, Any]:
    n = int(latencies.size)
    if n == 0:
        return {
            "requests": 0,
            "rate_per_s": 0.0,
            "p50_ms": None,
            "p99_ms": None,
            "errors": 0,
            "error_rate": None,
        }
    errors = int(np.count_nonzero(statuses >= 400))
    return {
        "requests": n,
        "rate_per_s": n / seconds,
        "p50_ms": float(np.percentile(latencies, 50)),
        "p99_ms": float(np.percentile(latencies, 99)),
        "errors": errors,
        "error_rate": errors / n,
    }


def traffic_summary(
    window_s: float = 300.0, *, now: float | None = None
) -> dict[str, dict[str, Any]]:
    """Per deployment over the last ``window_s`` seconds: requests, rate, p50/p99, error rate.

    Raises:
        InvalidInputError: ``window_s`` is not 1 s to 7 days.
    """
    if not 1 <= window_s <= 7 * 86400:
        raise InvalidInputError(f"window {window_s!r} s: expected 1 s to 7 days")
    end = now if now is not None else time.time()
    rows = _rows(None, end - window_s)
    out: dict[str, dict[str, Any]] = {}
    if not rows:
        return out
    names = np.array([r[0] for r in rows])
    statuses = np.array([r[2] for r in rows])
    latencies = np.array([r[3] for r in rows], dtype=float)
    for name in sorted(set(names.tolist())):
        mask = names == name
        out[name] = _stats(latencies[mask], statuses[mask], window_s)
    return out


def traffic_series(
    deployment: str,
    *,
    window_s: float = 3600.0,
    bucket_s: float = 60.0,
    now: float | None = None,
) -> dict[str, list[Any]]:
    """One deployment's traffic over time, in buckets of ``bucket_s`` seconds.

    Returns:
        ``{"ts": [bucket start...], "requests", "errors", "p50_ms", "p99_ms"}``, lists of equal
        length, oldest first; buckets without requests have None percentiles.

    Raises:
        InvalidInputError: a window or bucket out of range (at most 1,000 buckets).
    """
    if not 1 <= bucket_s <= window_s <= 7 * 86400 or window_s / bucket_s > 1000:
        raise InvalidInputError(
            f"window {window_s!r} s / bucket {bucket_s!r} s: at most 7 days and 1000 buckets"
        )
    end = now if now is not None else time.time()
    start = end - window_s
    rows = _rows(deployment, start)
    n_buckets = int(np.ceil(window_s / bucket_s))
    ts = np.array([r[1] for r in rows], dtype=float)
    statuses = np.array([r[2] for r in rows])
    latencies = np.array([r[3] for r in rows], dtype=float)
    index = np.clip(((ts - start) // bucket_s).astype(int), 0, n_buckets - 1) if rows else ts
    series: dict[str, list[Any]] = {
        "ts": [],
        "requests": [],
        "errors": [],
        "p50_ms": [],
        "p99_ms": [],
    }
    for b in range(n_buckets):
        mask = index == b
        stats = _stats(latencies[mask], statuses[mask], bucket_s)
        series["ts"].append(start + b * bucket_s)
        series["requests"].append(stats["requests"])
        series["errors"].append(stats["errors"])
        series["p50_ms"].append(stats["p50_ms"])
        series["p99_ms"].append(stats["p99_ms"])
    return series


def traffic_by_model(
    deployment: str, window_s: float = 3600.0, *, now: float | None = None
) -> dict[str, dict[str, Any]]:
    """Who answered ``deployment`` over the last ``window_s`` seconds, per model version.

    Shows the real split between a primary and its canary: ``{"churn@3": {"requests",
    "share", "rate_per_s", "p50_ms", "p99_ms", "errors", "error_rate"}}`` (requests that failed
    before a model was picked count under ``"-"``).

    Raises:
        InvalidInputError: ``window_s`` is not 1 s to 7 days.
    """
    if not 1 <= window_s <= 7 * 86400:
        raise InvalidInputError(f"window {window_s!r} s: expected 1 s to 7 days")
    end = now if now is not None else time.time()
    q = (
        select(RequestLogRow.model_version, RequestLogRow.status, RequestLogRow.latency_ms)
        .where(RequestLogRow.deployment == deployment, RequestLogRow.ts >= end - window_s)
        .order_by(RequestLogRow.id.desc())
        .limit(MAX_ROWS)
    )
    with session_scope() as s:
        rows = [tuple(r) for r in s.execute(q)]
    if not rows:
        return {}
    models = np.array([r[0] or "-" for r in rows])
    statuses = np.array([r[1] for r in rows])
    latencies = np.array([r[2] for r in rows], dtype=float)
    out = {}
    for model in sorted(set(models.tolist())):
        mask = models == model
        out[model] = {
            **_stats(latencies[mask], statuses[mask], window_s),
            "share": int(mask.sum()) / len(rows),
        }
    return out
