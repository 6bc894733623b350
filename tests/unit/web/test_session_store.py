"""Dashboards on two machines sharing an object store (moto's S3 server, the stand-in for
S3/MinIO) sign sessions with one secret: a session opened on one is valid on the other."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aifab.core.storage import get_store
from aifab.web import session


def test_a_session_opened_on_one_machine_is_valid_on_another(
    s3_storage: str, other_node: Callable[[], Path]
) -> None:
    value = session.issue("key_1")
    home = other_node()
    opened = session.read(value)
    assert opened is not None and opened.key_id == "key_1"
    assert session.valid_csrf(opened, session.csrf_token(opened))
    assert not (home / "web_secret").exists()  # the secret is on the store, not this disk
    assert len(get_store().read_bytes("web_secret")) == 32
