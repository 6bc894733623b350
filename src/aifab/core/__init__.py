"""Layer 0: settings, workspace, errors, ids, registry, metadata DB and the audit primitive.

No torch, mlflow, ray or fastapi here: everything imports this package.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aifab.core.actor import acting_as, current_actor
    from aifab.core.audit import ChainReport, audited, record_event
    from aifab.core.db import get_engine, session_scope
    from aifab.core.errors import (
        AifabError,
        ConflictError,
        IntegrityError,
        InvalidInputError,
        NotFoundError,
    )
    from aifab.core.schema_version import SCHEMA_REVISION
    from aifab.core.settings import Settings, get_settings
    from aifab.core.workspace import Workspace, get_workspace

#: Public name -> defining module. Resolved on first use: every aifab module imports something
#: from ``aifab.core``, and eager imports here would make each of them pay for SQLAlchemy and
#: pydantic-settings (the CLI's read-only commands read SQLite without either).
_EXPORTS = {
    "acting_as": "aifab.core.actor",
    "current_actor": "aifab.core.actor",
    "ChainReport": "aifab.core.audit",
    "audited": "aifab.core.audit",
    "record_event": "aifab.core.audit",
    "get_engine": "aifab.core.db",
    "session_scope": "aifab.core.db",
    "AifabError": "aifab.core.errors",
    "ConflictError": "aifab.core.errors",
    "IntegrityError": "aifab.core.errors",
    "InvalidInputError": "aifab.core.errors",
    "NotFoundError": "aifab.core.errors",
    "SCHEMA_REVISION": "aifab.core.schema_version",
    "Settings": "aifab.core.settings",
    "get_settings": "aifab.core.settings",
    "Workspace": "aifab.core.workspace",
    "get_workspace": "aifab.core.workspace",
}

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


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'aifab.core' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def init_workspace() -> dict[str, Any]:
    """Create the workspace directories and migrate the metadata DB; report where things are."""
    from aifab.core.audit import record_event
    from aifab.core.db import get_engine, session_scope
    from aifab.core.schema_version import SCHEMA_REVISION
    from aifab.core.settings import get_settings
    from aifab.core.storage import get_store
    from aifab.core.workspace import get_workspace

    settings = get_settings()
    ws = get_workspace(settings)
    get_engine()
    swept = ws.sweep_tmp()
    with session_scope() as s:
        record_event(s, "workspace.init", f"workspace:{ws.root}")
    out: dict[str, Any] = {
        "home": str(ws.root),
        "db_url": settings.resolved_db_url,
        "schema_revision": SCHEMA_REVISION,
        "lake": str(ws.lake),
        "stale_tmp_files_removed": swept,
    }
    store = get_store(settings)
    if not store.is_local:
        # The lake lives on the store; the local directory only caches its objects.
        lake_key = ws.lake.relative_to(ws.root).as_posix()
        out.update(storage=store.uri, lake=store.url(lake_key), lake_cache=str(ws.lake))
    return out


def verify_audit(anchors: Path | None = None) -> ChainReport:
    """Verify the audit hash chain of the configured metadata DB.

    Args:
        anchors: an exported anchor file to check too (see :func:`aifab.core.audit.write_anchor`).
    """
    from aifab.core.audit import verify_chain
    from aifab.core.db import session_scope

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
    from aifab.core.audit import list_events
    from aifab.core.db import session_scope

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
