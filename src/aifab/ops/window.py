"""A window of the request log as plain records, and the pure measures over it.

Reading is the one I/O here (:func:`load_window`); feature columns, predicted classes, service
objectives and labelled accuracy are pure functions of the rows, tested alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sqlalchemy import select

from aifab.core.db import session_scope
from aifab.inference.tables import RequestLogRow
from aifab.ops.tables import FeedbackRow

__all__ = ["feature_columns", "labelled_accuracy", "load_window", "predicted_labels", "slo_values"]

#: Rows read per window at most (a monitor samples; it never needs the whole log).
MAX_WINDOW_ROWS = 200_000


def load_window(deployment: str, start: float, end: float) -> list[dict[str, Any]]:
    """Logged requests of ``deployment`` with ``start <= ts < end``, oldest first."""
    q = (
        select(
            RequestLogRow.ts,
            RequestLogRow.status,
            RequestLogRow.latency_ms,
            RequestLogRow.input,
            RequestLogRow.output,
            RequestLogRow.request_id,
            RequestLogRow.model_version,
            RequestLogRow.route,
        )
        .where(RequestLogRow.deployment == deployment)
        .where(RequestLogRow.ts >= start, RequestLogRow.ts < end)
        .order_by(RequestLogRow.id)
        .limit(MAX_WINDOW_ROWS)
    )
    with session_scope() as s:
        return [dict(r._mapping) for r in s.execute(q)]


def _records(row: Mapping[str, Any]) -> list[Any]:
    inp = row.get("input") or {}
    records = inp.get("records") if isinstance(inp, dict) else None
    return records if isinstance(records, list) else []


def feature_columns(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Column -> values of every logged input record (successful requests only).

    A column some records lack gets ``None`` there, so every column has one value per record.
    """
    cols: dict[str, list[Any]] = {}
    n = 0
    for row in rows:
        if int(row.get("status") or 0) >= 400:
            continue
        for rec in _records(row):
            if not isinstance(rec, dict):
                continue
            for k, v in rec.items():
                cols.setdefault(str(k), [None] * n).append(v)
            n += 1
            for values in cols.values():
                if len(values) < n:
                    values.append(None)
    return cols


def _predictions(row: Mapping[str, Any]) -> list[Any]:
    out = row.get("output") or {}
    preds = out.get("predictions") if isinstance(out, dict) else None
    return preds if isinstance(preds, list) else []


def predicted_labels(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The predicted class of every logged prediction (as text)."""
    labels: list[str] = []
    for row in rows:
        for p in _predictions(row):
            label = p.get("label") if isinstance(p, dict) else None
            if label is not None:
                labels.append(str(label))
    return labels


def slo_values(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Requests, p50/p99 latency (ms) and the share of server errors (5xx) in the window."""
    if not rows:
        return {"requests": 0.0}
    lat = np.fromiter((float(r.get("latency_ms") or 0.0) for r in rows), dtype=np.float64)
    errors = sum(1 for r in rows if int(r.get("status") or 0) >= 500)
    return {
        "requests": float(len(rows)),
        "latency_p50_ms": float(np.percentile(lat, 50)),
        "latency_p99_ms": float(np.percentile(lat, 99)),
        "error_rate": errors / len(rows),
    }


def load_feedback(request_ids: Sequence[str]) -> dict[tuple[str, int], str]:
    """Labels that arrived for these requests: ``(request_id, item) -> label`` (the latest)."""
    out: dict[tuple[str, int], str] = {}
    ids = sorted({r for r in request_ids if r})
    with session_scope() as s:
        for i in range(0, len(ids), 500):
            q = select(FeedbackRow).where(FeedbackRow.request_id.in_(ids[i : i + 500]))
            for fb in s.scalars(q.order_by(FeedbackRow.id)):
                out[(fb.request_id, fb.item)] = fb.label
    return out


def labelled_accuracy(
    rows: Sequence[Mapping[str, Any]], labels: Mapping[tuple[str, int], str]
) -> dict[str, float]:
    """Accuracy of the window's predictions whose labels arrived (delayed labels included)."""
    right = total = 0
    for row in rows:
        rid = row.get("request_id")
        if not rid:
            continue
        for i, p in enumerate(_predictions(row)):
            truth = labels.get((str(rid), i))
            if truth is None or not isinstance(p, dict):
                continue
            total += 1
            right += int(str(p.get("label")) == truth)
    out = {"labelled": float(total)}
    if total:
        out["accuracy"] = right / total
    return out
