"""Layer 0: settings, workspace, errors, ids, registry, metadata DB and the audit primitive.

No torch, mlflow, ray or fastapi here: everything imports this package.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aifab.core.actor import acting_as, current_actor
from aifab.core.audit import ChainReport, audited, list_events, record_event, verify_chain
from aifab.core.db import SCHEMA_REVISION, get_engine, session_scope
from aifab.core.errors import (
    AifabError,
    ConflictError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
)
from aifab.core.settings import Settings, get_settings
from aifab.core.workspace import Workspace, get_workspace

__all__ = [
    "AifabError",
    "ChainReport",
    "ConflictError",
    "IntegrityError",
    "InvalidInputError",
    "NotFoundError",
    "SCHEMA_REVISION",
    "Settings",
    "Workspace",
    "acting_as",
    "audit_events",
    "audited",
    "current_actor",
    "get_engine",
    "get_settings",
    "get_workspace",
    "init_workspace",
    "record_event",
    "session_scope",
    "verify_audit",
]


def init_workspace() -> dict[str, Any]:
    """Create the workspace directories and migrate the metadata DB; report where things are."""
    settings = get_settings()
    ws = get_workspace(settings)
    get_engine()
    swept = ws.sweep_tmp()
    with session_scope() as s:
        record_event(s, "workspace.init", f"workspace:{ws.root}")
    return {
        "home": str(ws.root),
        "db_url": settings.resolved_db_url,
        "schema_revision": SCHEMA_REVISION,
        "lake": str(ws.lake),
        "stale_tmp_files_removed": swept,
    }


def verify_audit(anchors: Path | None = None) -> ChainReport:
    """Verify the audit hash chain of the configured metadata DB.

    Args:
        anchors: an exported anchor file to check too (see :func:`aifab.core.audit.write_anchor`).
    """
    with session_scope(readonly=True) as s:
        return verify_chain(s, anchors)


def audit_events(
    limit: int = 50,
    action: str | None = None,
    *,
    obj: str | None = None,
    actor: str | None = None,
    since: float | None = None,
    until: float | None = None,
    offset: int = 0,
    before: int | None = None,
    after: int | None = None,
) -> list[dict[str, Any]]:
    """Recent audit events as dicts, newest first.

    Args:
        limit: at most this many.
        action: only actions starting with this (``job.``).
        obj: only objects starting with this (``model:churn``).
        actor: only this actor (``key:key-...``, ``user:alice``).
        since: only events at or after this UNIX time.
        until: only events before this UNIX time.
        offset: skip this many of the newest matching events (the next page).
        before: only events with a smaller id (the page after the one ending there).
        after: only the oldest events with a larger id (the page before the one starting there).
    """
    with session_scope(readonly=True) as s:
        return [
            {
                "id": e.id,
                "ts": e.ts,
                "actor": e.actor,
                "action": e.action,
                "object": e.object,
                "params_digest": e.params_digest,
                "hash": e.hash,
            }
            for e in list_events(
                s,
                limit=limit,
                action=action,
                obj=obj,
                actor=actor,
                since=since,
                until=until,
                offset=offset,
                before=before,
                after=after,
            )
        ]
