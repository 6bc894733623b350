"""Traffic of deployments from the request log: request rate, latency percentiles, errors.

Read by the dashboard (and anyone watching a deployment). The log is sampled by
``aifab serve --log-sample``: counts are of logged requests, and every error is logged. A query
reads at most :data:`MAX_ROWS` rows: when a window holds more, it reads an even sample (every
k-th row by id) and scales the counts by k, so a busy log never makes a page slow.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from sqlalchemy import func, select

from aifab.core.db import session_scope
from aifab.core.errors import InvalidInputError
from aifab.inference.tables import RequestLogRow

__all__ = ["traffic_by_model", "traffic_series", "traffic_summary", "traffic_window"]

#: The most log rows one query reads; beyond it, an even sample is read.
MAX_ROWS = 10_000


def _rows(deployment: str | None, since: float) -> tuple[list[tuple[Any, ...]], int]:
    """``(deployment, ts, status, latency_ms, model_version)`` rows since ``since``, and k.

    k is the sampling stride: 1 when the window has at most :data:`MAX_ROWS` rows.
    """
    where = [RequestLogRow.ts >= since]
    if deployment is not None:
        where.append(RequestLogRow.deployment == deployment)
    q = select(
        RequestLogRow.deployment,
        RequestLogRow.ts,
        RequestLogRow.status,
        RequestLogRow.latency_ms,
        RequestLogRow.model_version,
    ).where(*where)
    with session_scope() as s:
        total = int(s.scalar(select(func.count()).select_from(RequestLogRow).where(*where)) or 0)
        stride = max(1, -(-total // MAX_ROWS))
        if stride > 1:
            q = q.where(RequestLogRow.id % stride == 0)
        return [tuple(r) for r in s.execute(q)], stride


def _stats(
    latencies: np.ndarray, statuses: np.ndarray, seconds: float, scale: int = 1
) -> dict[str, Any]:
    n = int(latencies.size) * scale
    if n == 0:
        return {
            "requests": 0,
            "rate_per_s": 0.0,
            "p50_ms": None,
            "p99_ms": None,
            "errors": 0,
            "error_rate": None,
        }
    errors = int(np.count_nonzero(statuses >= 400)) * scale
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
    _check_window(window_s)
    end = now if now is not None else time.time()
    rows, stride = _rows(None, end - window_s)
    out: dict[str, dict[str, Any]] = {}
    if not rows:
        return out
    names = np.array([r[0] for r in rows])
    statuses = np.array([r[2] for r in rows])
    latencies = np.array([r[3] for r in rows], dtype=float)
    for name in sorted(set(names.tolist())):
        mask = names == name
        out[name] = _stats(latencies[mask], statuses[mask], window_s, stride)
    return out


def _check_window(window_s: float, bucket_s: float | None = None) -> None:
    if bucket_s is None:
        if not 1 <= window_s <= 7 * 86400:
            raise InvalidInputError(f"window {window_s!r} s: expected 1 s to 7 days")
    elif not 1 <= bucket_s <= window_s <= 7 * 86400 or window_s / bucket_s > 1000:
        raise InvalidInputError(
            f"window {window_s!r} s / bucket {bucket_s!r} s: at most 7 days and 1000 buckets"
        )


def _series(
    rows: list[tuple[Any, ...]], stride: int, start: float, window_s: float, bucket_s: float
) -> dict[str, list[Any]]:
    n_buckets = int(np.ceil(window_s / bucket_s))
    ts = np.array([r[1] for r in rows], dtype=float)
    statuses = np.array([r[2] for r in rows])
    latencies = np.array([r[3] for r in rows], dtype=float)
    index = np.clip(((ts - start) // bucket_s).astype(int), 0, n_buckets - 1) if rows else ts
    series: dict[str, list[Any]] = {k: [] for k in ("ts", "requests", "errors", "p50_ms", "p99_ms")}
    for b in range(n_buckets):
        mask = index == b
        stats = _stats(latencies[mask], statuses[mask], bucket_s, stride)
        series["ts"].append(start + b * bucket_s)
        for key in ("requests", "errors", "p50_ms", "p99_ms"):
            series[key].append(stats[key])
    return series


def _by_model(
    rows: list[tuple[Any, ...]], stride: int, window_s: float
) -> dict[str, dict[str, Any]]:
    if not rows:
        return {}
    models = np.array([r[4] or "-" for r in rows])
    statuses = np.array([r[2] for r in rows])
    latencies = np.array([r[3] for r in rows], dtype=float)
    out = {}
    for model in sorted(set(models.tolist())):
        mask = models == model
        out[model] = {
            **_stats(latencies[mask], statuses[mask], window_s, stride),
            "share": int(mask.sum()) / len(rows),
        }
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
    _check_window(window_s, bucket_s)
    start = (now if now is not None else time.time()) - window_s
    rows, stride = _rows(deployment, start)
    return _series(rows, stride, start, window_s, bucket_s)


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
    _check_window(window_s)
    rows, stride = _rows(deployment, (now if now is not None else time.time()) - window_s)
    return _by_model(rows, stride, window_s)


def traffic_window(
    deployment: str,
    *,
    window_s: float = 3600.0,
    bucket_s: float = 60.0,
    now: float | None = None,
) -> dict[str, Any]:
    """:func:`traffic_series` and :func:`traffic_by_model` of one window, read from the log once.

    Returns:
        ``{"series": ..., "by_model": ...}`` as those functions return them.

    Raises:
        InvalidInputError: a window or bucket out of range (at most 1,000 buckets).
    """
    _check_window(window_s, bucket_s)
    start = (now if now is not None else time.time()) - window_s
    rows, stride = _rows(deployment, start)
    return {
        "series": _series(rows, stride, start, window_s, bucket_s),
        "by_model": _by_model(rows, stride, window_s),
    }
