"""The quarantine table: rows rejected at ingest or by validation, kept with their reason."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from aifab.core.audit import record_event
from aifab.core.db import session_scope
from aifab.data.tables import QuarantineRow

_BATCH = 5000


@dataclass(frozen=True)
class QuarantineItem:
    """One rejected row: which rule it broke, why, where it was (line) and what it held."""

    rule: str
    reason: str
    record: Any = None
    line: int | None = None


def quarantine(
    dataset: str, stage: str, items: Iterable[QuarantineItem], version_id: int | None = None
) -> int:
    """Store rejected rows (in batches, one audit event); return how many were stored."""
    total = 0
    batch: list[dict[str, Any]] = []
    now = time.time()

    def flush() -> None:
        with session_scope() as s:
            s.execute(QuarantineRow.__table__.insert(), batch)  # type: ignore[attr-defined]

    for item in items:
        batch.append(
            {
                "dataset": dataset,
                "version_id": version_id,
                "stage": stage,
                "rule": item.rule,
                "line": item.line,
                "reason": item.reason,
                "record": item.record,
                "created_at": now,
            }
        )
        if len(batch) >= _BATCH:
            flush()
            total += len(batch)
            batch = []
    if batch:
        flush()
        total += len(batch)
    if total:
        with session_scope() as s:
            record_event(s, f"quarantine.{stage}", f"dataset:{dataset}", {"rows": total})
    return total


def list_quarantine(
    dataset: str, stage: str | None = None, limit: int = 100, *, offset: int = 0
) -> list[dict[str, Any]]:
    """Quarantined rows of a dataset, newest first (``offset`` rows skipped)."""
    with session_scope() as s:
        q = select(QuarantineRow).where(QuarantineRow.dataset == dataset)
        if stage:
            q = q.where(QuarantineRow.stage == stage)
        q = q.order_by(QuarantineRow.id.desc()).offset(max(0, offset))
        rows = s.scalars(q.limit(limit))
        return [
            {
                "id": r.id,
                "stage": r.stage,
                "rule": r.rule,
                "line": r.line,
                "reason": r.reason,
                "record": r.record,
                "version_id": r.version_id,
                "created_at": r.created_at,
            }
            for r in rows
        ]


def count_quarantine(dataset: str, stage: str | None = None) -> dict[str, int]:
    """How many rows each rule quarantined for ``dataset``."""
    with session_scope() as s:
        q = select(QuarantineRow.rule, func.count()).where(QuarantineRow.dataset == dataset)
        if stage:
            q = q.where(QuarantineRow.stage == stage)
        return {rule: int(n) for rule, n in s.execute(q.group_by(QuarantineRow.rule)).all()}
