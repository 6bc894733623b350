"""Dashboard sessions on the server: opened at sign-in, ended by sign-out, revocation or an admin.

The signed cookie (:mod:`aifab.web.session`) proves who issued it; this table says whether the
session is still open, so a copy of a cookie replayed after sign-out, after its key was revoked
or after an admin signed everyone out is refused. Rows hold the SHA-256 of the session id only.
They live in the metadata DB, so every server process and machine sees an ending at once.
"""

from __future__ import annotations

import hashlib
import time

from sqlalchemy import delete, func, select

from aifab.core.audit import record_event
from aifab.core.db import session_scope
from aifab.core.errors import NotFoundError
from aifab.serve.tables import ApiKeyRow, UiSessionRow

__all__ = ["end_session", "end_sessions", "open_session", "session_open"]


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def open_session(session_id: str, key_id: str, expires_at: float) -> None:
    """Record a new session (and drop expired ones, so the table stays small)."""
    now = time.time()
    with session_scope() as s:
        s.execute(delete(UiSessionRow).where(UiSessionRow.expires_at < now))
        s.add(
            UiSessionRow(id=_hash(session_id), key_id=key_id, created_at=now, expires_at=expires_at)
        )


def session_open(session_id: str, key_id: str) -> bool:
    """Whether this session of ``key_id`` is open: recorded, not ended and not expired."""
    with session_scope() as s:
        row = s.get(UiSessionRow, _hash(session_id))
        return row is not None and row.key_id == key_id and row.expires_at >= time.time()


def end_session(session_id: str) -> None:
    """End one session (signing out); ending an ended one is a no-op."""
    with session_scope() as s:
        s.execute(delete(UiSessionRow).where(UiSessionRow.id == _hash(session_id)))


def end_sessions(key_id: str | None = None) -> int:
    """End every dashboard session of ``key_id``, or of every key when None ("sign out everywhere").

    Returns:
        How many sessions were open.

    Raises:
        NotFoundError: no key has this id.
    """
    with session_scope() as s:
        query = select(func.count()).select_from(UiSessionRow)
        if key_id is not None:
            if s.get(ApiKeyRow, key_id) is None:
                raise NotFoundError(f"no API key {key_id!r} (see 'aifab keys list')")
            query = query.where(UiSessionRow.key_id == key_id)
        ended = int(s.scalar(query) or 0)
        stmt = delete(UiSessionRow)
        if key_id is not None:
            stmt = stmt.where(UiSessionRow.key_id == key_id)
        s.execute(stmt)
        target = f"key:{key_id}" if key_id is not None else "keys:*"
        record_event(s, "key.sign_out", target, {"sessions": ended})
        return ended
