"""Dashboard sessions: a signed cookie naming the API key it was opened with, and CSRF tokens.

The cookie holds ``key id . expiry . nonce`` and an HMAC over them with a per-workspace secret
(the ``web_secret`` file, owner-only), so every process of ``aifab serve --workers N`` reads
the same sessions without shared memory. The secret key itself is never stored in the cookie.
The nonce is the session's id: the server records it at sign-in (:mod:`aifab.serve.sessions`)
and each request checks the session is still open and its key still active, so signing out,
revoking the key or an admin's "sign out everywhere" ends it even for a replayed cookie.
With ``AIFAB_STORAGE_URI`` set the secret is a write-once object on the store, so dashboards on
several machines (behind one address) accept each other's sessions.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from aifab.core.storage import get_store
from aifab.core.workspace import get_workspace

__all__ = [
    "COOKIE",
    "MAX_AGE_S",
    "Session",
    "csrf_token",
    "issue",
    "new_session",
    "read",
    "valid_csrf",
]

#: The session cookie's name.
COOKIE = "aifab_session"
#: How long a session lasts after signing in.
MAX_AGE_S = 12 * 3600
_SECRET_FILE = "web_secret"
_lock = threading.Lock()
_secrets: dict[Path, bytes] = {}


@dataclass(frozen=True)
class Session:
    """A signed-in browser: the key it signed in with, and when the session ends."""

    key_id: str
    expires: float
    nonce: str


def _secret() -> bytes:
    """The workspace's signing secret, created once (O_EXCL: concurrent workers agree)."""
    path = get_workspace().root / _SECRET_FILE
    with _lock:
        cached = _secrets.get(path)
        if cached is not None:
            return cached
        store = get_store()
        if not store.is_local:
            # The first machine's secret wins the conditional put; every other one reads it.
            store.write_bytes(_SECRET_FILE, secrets.token_bytes(32), once=True)
            _secrets[path] = value = store.read_bytes(_SECRET_FILE)
            return value
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            value = _read_secret(path)
        else:
            value = secrets.token_bytes(32)
            with os.fdopen(fd, "wb") as fh:
                fh.write(value)
                fh.flush()
                os.fsync(fh.fileno())
        _secrets[path] = value
        return value


def _read_secret(path: Path) -> bytes:
    # Another process may have created the file a moment ago and not written it yet.
    for _ in range(50):
        value = path.read_bytes()
        if len(value) == 32:
            return value
        time.sleep(0.01)
    raise RuntimeError(f"the dashboard's secret {path} is damaged: delete it to sign everyone out")


def _sign(payload: str) -> str:
    digest = hmac.new(_secret(), payload.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def new_session(key_id: str, *, now: float | None = None) -> tuple[str, Session]:
    """A new session of ``key_id`` and its cookie value (the server records it, not this)."""
    expires = int((now if now is not None else time.time()) + MAX_AGE_S)
    nonce = secrets.token_urlsafe(16)
    payload = f"{key_id}.{expires}.{nonce}"
    return f"{payload}.{_sign(payload)}", Session(key_id, float(expires), nonce)


def issue(key_id: str, *, now: float | None = None) -> str:
    """A new session cookie value for ``key_id``."""
    return new_session(key_id, now=now)[0]


def read(value: str | None, *, now: float | None = None) -> Session | None:
    """The session in a cookie value, or None when it is missing, forged or expired."""
    if not value or len(value) > 400:
        return None
    parts = value.split(".")
    if len(parts) != 4:
        return None
    key_id, expires, nonce, signature = parts
    if not hmac.compare_digest(signature, _sign(f"{key_id}.{expires}.{nonce}")):
        return None
    if not expires.isdigit() or int(expires) < (now if now is not None else time.time()):
        return None
    return Session(key_id, float(expires), nonce)


def csrf_token(session: Session) -> str:
    """The CSRF token every form of this session carries (bound to the session's nonce)."""
    return _sign(f"csrf.{session.key_id}.{session.nonce}")


def valid_csrf(session: Session, token: str | None) -> bool:
    """Whether ``token`` is this session's CSRF token."""
    return bool(token) and hmac.compare_digest(str(token), csrf_token(session))
