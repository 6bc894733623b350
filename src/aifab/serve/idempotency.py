"""``Idempotency-Key`` for requests that must not run twice (record pushes).

As Stripe's API and the IETF draft (draft-ietf-httpapi-idempotency-key-header) do it.

The first request with a key reserves it (one row per API key and idempotency key, in the
metadata DB, so every server process and machine agrees); its answer is stored once the work is
done, and a retry with the same key and request gets that answer again. A retry while the first
is still running is told so (409); the same key with another request is refused (422). A
reservation whose work did not start (refused or failed before it) is dropped, so a retry runs.
Keys are kept :data:`TTL_S` seconds.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError

from aifab.core.db import session_scope
from aifab.serve.tables import IdempotentRequestRow

__all__ = ["MAX_KEY_CHARS", "TTL_S", "Prior", "abandon", "fingerprint", "finish", "reserve"]

#: How long an answer is kept for retries (Stripe keeps keys for 24 hours).
TTL_S = 24 * 3600.0
#: The longest ``Idempotency-Key`` accepted (Stripe's limit).
MAX_KEY_CHARS = 255


@dataclass(frozen=True)
class Prior:
    """An earlier request with the same key: ``status`` is None while it is still running."""

    same_request: bool
    status: int | None
    body: Any


def fingerprint(route: str, body: bytes) -> str:
    """What identifies a request: its route and its exact body."""
    return hashlib.sha256(route.encode() + b"\0" + body).hexdigest()


def reserve(key_id: str, idempotency_key: str, print_: str) -> Prior | None:
    """Reserve ``idempotency_key`` for a new request, or the earlier request that holds it.

    Returns:
        None when this request holds the key now and must do its work, else the earlier one.
    """
    now = time.time()
    for _ in range(2):  # a racing first request may insert between our read and our insert
        try:
            with session_scope() as s:
                s.execute(
                    delete(IdempotentRequestRow).where(
                        IdempotentRequestRow.created_at < now - TTL_S
                    )
                )
                row = s.get(IdempotentRequestRow, (key_id, idempotency_key))
                if row is not None:
                    body = json.loads(row.body) if row.body is not None else None
                    return Prior(row.fingerprint == print_, row.status, body)
                s.add(
                    IdempotentRequestRow(
                        key_id=key_id,
                        idempotency_key=idempotency_key,
                        fingerprint=print_,
                        created_at=now,
                    )
                )
                return None
        except IntegrityError:
            continue
    return Prior(False, None, None)  # pragma: no cover - the row appeared and vanished twice


def finish(key_id: str, idempotency_key: str, status: int, body: Any) -> None:
    """Store the answer of the request that holds the key, for its retries."""
    with session_scope() as s:
        row = s.get(IdempotentRequestRow, (key_id, idempotency_key))
        if row is not None:
            row.status = status
            row.body = json.dumps(body)


def abandon(key_id: str, idempotency_key: str) -> None:
    """Drop a reservation whose work never started, so a retry runs it."""
    with session_scope() as s:
        s.execute(
            delete(IdempotentRequestRow).where(
                IdempotentRequestRow.key_id == key_id,
                IdempotentRequestRow.idempotency_key == idempotency_key,
                IdempotentRequestRow.status.is_(None),
            )
        )
