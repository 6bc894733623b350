"""Who is acting: the API key id over HTTP, ``AIFAB_ACTOR`` or the OS user from the CLI."""

from __future__ import annotations

import contextlib
import contextvars
import getpass
from collections.abc import Iterator

from aifab.core.settings import get_settings

_actor: contextvars.ContextVar[str | None] = contextvars.ContextVar("aifab_actor", default=None)


def current_actor() -> str:
    """The actor for audit events in this context."""
    explicit = _actor.get()
    if explicit:
        return explicit
    configured = get_settings().actor
    if configured:
        return configured
    try:
        return f"user:{getpass.getuser()}"
    except (KeyError, OSError):
        return "user:unknown"


@contextlib.contextmanager
def acting_as(actor: str) -> Iterator[None]:
    """Run a block with ``actor`` as the audit actor (the server wraps each request in it)."""
    token = _actor.set(actor)
    try:
        yield
    finally:
        _actor.reset(token)
