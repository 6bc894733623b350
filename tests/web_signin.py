"""Signing a test client in to the dashboard with a new key, and the session's CSRF token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aifab.serve.keys import create_key
from aifab.web import session


@dataclass
class SignedIn:
    """The key a client signed in with and its session's CSRF token."""

    record: dict[str, Any]
    csrf: str


def csrf(client: Any) -> str:
    """The CSRF token of ``client``'s current dashboard session."""
    found = session.read(client.cookies.get(session.COOKIE))
    assert found is not None, "the client has no dashboard session"
    return session.csrf_token(found)


def sign_in(client: Any, role: str = "viewer", **key_options: Any) -> SignedIn:
    """Sign ``client`` in (dropping any session it had) with a new key of ``role``."""
    record, secret = create_key(role, name=f"{role}-web", **key_options)
    client.cookies.clear()
    r = client.post("/ui/login", data={"key": secret, "next": "/ui"}, follow_redirects=False)
    assert r.status_code == 303, r.text
    return SignedIn(record, csrf(client))
