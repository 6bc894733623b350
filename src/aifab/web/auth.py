"""Who is looking: the signed-in viewer of a page, role checks, and checked form posts.

:func:`viewer` is the dependency of every page: no valid session (a forged or expired cookie,
one whose session was ended on the server, or a revoked key) sends the browser to the sign-in
page; client keys (which only call models) are refused. Pages that change something read their
form with :func:`read_form`, which checks the request comes from this site and carries the
session's CSRF token, and then call :func:`need` for the role.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from fastapi import Request

from aifab.serve.keys import PERMISSIONS, KeyInfo, key_info
from aifab.serve.sessions import session_open
from aifab.web.session import COOKIE, Session, csrf_token, read, valid_csrf

__all__ = ["LoginRequired", "UiError", "Viewer", "need", "read_form", "same_origin", "viewer"]

#: Forms are small: a key, a few fields. Anything bigger is refused before parsing.
MAX_FORM_BYTES = 64 * 1024
_KEY_TTL_S = 1.0  # a revoked key's sessions end within this long (as the API's key cache)
_keys: dict[str, tuple[KeyInfo | None, float]] = {}
_keys_lock = threading.Lock()


class UiError(Exception):
    """A page refuses: rendered as an HTML error page with ``status`` and ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class LoginRequired(Exception):
    """No (valid) session: the browser is sent to the sign-in page, then back."""


@dataclass(frozen=True)
class Viewer:
    """A signed-in person: their key (as read at most a second ago) and their session."""

    key: KeyInfo
    session: Session

    @property
    def key_id(self) -> str:
        """The key's id."""
        return self.key.id

    @property
    def name(self) -> str:
        """The key's name."""
        return self.key.name

    @property
    def role(self) -> str:
        """The key's role."""
        return self.key.role

    def can(self, permission: str) -> bool:
        """Whether this viewer's role has ``permission`` (read, deploy, keys, ...)."""
        return permission in PERMISSIONS.get(self.role, frozenset())

    @property
    def actor(self) -> str:
        """The audit actor of changes made through the dashboard (the key, as in the API)."""
        return f"key:{self.key_id}"

    @property
    def csrf(self) -> str:
        """The token this viewer's forms must carry."""
        return csrf_token(self.session)


def _active_key(key_id: str) -> KeyInfo | None:
    now = time.monotonic()
    with _keys_lock:
        hit = _keys.get(key_id)
    if hit is not None and hit[1] > now:
        return hit[0]
    key = key_info(key_id)
    with _keys_lock:
        if len(_keys) > 10_000:
            _keys.clear()
        _keys[key_id] = (key, now + _KEY_TTL_S)
    return key


def _session_key(session: Session) -> KeyInfo | None:
    # The session row is read on every request, uncached: an ended session must not linger.
    if not session_open(session.nonce, session.key_id):
        return None
    return _active_key(session.key_id)


async def viewer(request: Request) -> Viewer:
    """The page dependency: the signed-in viewer, or :class:`LoginRequired`."""
    session = read(request.cookies.get(COOKIE))
    if session is None:
        raise LoginRequired
    key = await asyncio.to_thread(_session_key, session)
    if key is None:
        raise LoginRequired
    if "read" not in PERMISSIONS.get(key.role, frozenset()):
        raise UiError(403, f"role {key.role!r} cannot read the dashboard")
    found = Viewer(key, session)
    request.state.viewer = found
    return found


def need(who: Viewer, permission: str) -> None:
    """Refuse (403) unless ``who`` has ``permission``; the message names role and permission."""
    if not who.can(permission):
        raise UiError(403, f"role {who.role!r} of key {who.key_id} lacks permission {permission!r}")


def same_origin(request: Request) -> bool:
    """Whether a POST comes from this site (its Origin, else Referer, names this host)."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source:
        return True  # non-browser clients send neither; browsers always send Origin on POST
    host = request.headers.get("host", "")
    return urlsplit(source).netloc == host


async def read_form(request: Request, who: Viewer | None) -> dict[str, str]:
    """A posted form's fields, after the size, origin and (for a session) CSRF checks.

    Raises:
        UiError: over :data:`MAX_FORM_BYTES` (413), from another site or without the session's
            CSRF token (403), not a URL-encoded form (415).
    """
    if not same_origin(request):
        raise UiError(403, "this form was posted from another site")
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if kind != "application/x-www-form-urlencoded":
        raise UiError(415, "forms are sent as application/x-www-form-urlencoded")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise UiError(413, f"a form is at most {MAX_FORM_BYTES // 1024} KB")
    try:
        fields = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
    except UnicodeDecodeError as exc:
        raise UiError(400, "the form is not UTF-8") from exc
    if who is not None:
        token = fields.pop("csrf", None) or request.headers.get("x-csrf-token")
        if not valid_csrf(who.session, token):
            raise UiError(403, "the form's CSRF token is missing or stale: reload the page")
    return fields
