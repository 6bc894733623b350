"""Feedback: labels that arrive (possibly long) after a prediction, keyed by its request id.

:func:`record_feedback` stores them; :func:`labelled_traffic` joins them to the request log's
rows (what came in, what was predicted, which model version answered) for the gate and the
canary watch of the closed loop.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from aifab.core.actor import current_actor
from aifab.core.audit import record_event
from aifab.core.db import session_scope
from aifab.core.errors import InvalidInputError
from aifab.inference.tables import RequestLogRow
from aifab.ops.tables import FeedbackRow

__all__ = ["labelled_traffic", "record_feedback"]

MAX_LABELS = 10_000


def record_feedback(request_id: str, labels: Sequence[Any]) -> dict[str, Any]:
    """Store the true labels of a served request (one per row it predicted, in order).

    A label may arrive before the sampled request log has the request, or for a request the
    log did not sample: it is kept either way, and ``matched`` says whether the log has it.

    Raises:
        InvalidInputError: an empty or overlong request id, no labels, or a label that is not
            a string, number or boolean.
    """
    rid = str(request_id or "").strip()
    if not rid or len(rid) > 64:
        raise InvalidInputError("request_id: expected the id a prediction returned (<= 64 chars)")
    if not labels or len(labels) > MAX_LABELS:
        raise InvalidInputError(f"labels: expected 1 to {MAX_LABELS} labels")
    for i, label in enumerate(labels):
        if label is None or not isinstance(label, str | int | float | bool):
            raise InvalidInputError(f"labels[{i}]: expected a string, number or boolean")
    now, actor = time.time(), current_actor()
    with session_scope() as s:
        for i, label in enumerate(labels):
            s.add(FeedbackRow(request_id=rid, item=i, label=str(label)[:200], ts=now, actor=actor))
        matched = (
            s.scalars(select(RequestLogRow.id).where(RequestLogRow.request_id == rid)).first()
            is not None
        )
        record_event(s, "feedback.record", f"request:{rid}", {"labels": len(labels)})
    return {"request_id": rid, "labels": len(labels), "matched": matched}


def labelled_traffic(deployment: str, since: float, limit: int = 20_000) -> list[dict[str, Any]]:
    """Logged prediction rows of ``deployment`` since ``since`` whose labels arrived.

    Returns:
        Oldest first, the newest ``limit`` at most: ``{"record": input row, "label": true label,
        "predicted": the served label or None, "model": NAME@VERSION that answered}``.
    """
    from aifab.ops.window import load_feedback, load_window

    rows = [r for r in load_window(deployment, since, time.time() + 1.0) if r.get("request_id")]
    labels = load_feedback([str(r["request_id"]) for r in rows])
    out: list[dict[str, Any]] = []
    for row in rows:
        inp, res = row.get("input") or {}, row.get("output") or {}
        records = inp.get("records") if isinstance(inp, dict) else None
        preds = res.get("predictions") if isinstance(res, dict) else None
        for i, rec in enumerate(records if isinstance(records, list) else []):
            truth = labels.get((str(row["request_id"]), i))
            if truth is None or not isinstance(rec, dict):
                continue
            pred = preds[i] if isinstance(preds, list) and i < len(preds) else None
            label = pred.get("label") if isinstance(pred, dict) else None
            out.append(
                {
                    "record": rec,
                    "label": truth,
                    "predicted": None if label is None else str(label),
                    "model": row.get("model_version"),
                }
            )
    return out[-limit:]
