"""The audit chain's secret and its anchors, both kept outside the metadata DB.

The key (``AIFAB_AUDIT_KEY``, else an owner-only ``audit.key`` file in the workspace) makes event
hashes HMACs that a DB writer cannot recompute. On a team's shared DB every process must hold
the same key, so there the key comes from ``AIFAB_AUDIT_KEY`` (a secret given to every machine,
Ray node and pod, like the DB URL) or a key file already in a shared workspace: a process
without either refuses to write (:class:`AuditKeyMissingError`) rather than make a key of its
own, which would break the chain for everyone else. The key file also records how many unkeyed
events (written before keying) start the chain. Anchors are MAC'd head records (``count``,
``hash``) appended to ``audit-anchors.jsonl``, or, with a store (``AIFAB_STORAGE_URI``),
written once as objects under ``audit/anchors/`` that every machine, node and pod shares; a
deleted tail that held an anchored event is found by :func:`aifab.core.audit.verify_chain`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aifab.core.errors import AifabError
from aifab.core.ids import canonical_json, new_id
from aifab.core.settings import get_settings


class AuditKeyMissingError(AifabError):
    """A process on a team's shared DB has no audit key, so it cannot append to the chain."""

    http_status = 500  # the server's configuration, not the caller's request


@dataclass(frozen=True)
class AuditKey:
    """The HMAC key and, for a key file, how many unkeyed events preceded it."""

    secret: bytes
    unkeyed: int | None = None


#: Where anchors live on a store: one write-once object per anchor.
ANCHOR_PREFIX = "audit/anchors"
#: Stores known to hold an anchor (aifab never deletes one), so events need not list them.
_anchored: set[str] = set()


def key_path() -> Path:
    """The workspace's owner-only key file."""
    return get_settings().resolved_home / "audit.key"


def anchor_path() -> Path:
    """The workspace's append-only anchor file (one JSON line per anchor)."""
    return get_settings().resolved_home / "audit-anchors.jsonl"


def _read_key_file(path: Path) -> AuditKey:
    data = json.loads(path.read_text(encoding="utf-8"))
    return AuditKey(bytes.fromhex(data["key"]), int(data["unkeyed"]))


def load_key(create_with_unkeyed: int | None = None) -> AuditKey | None:
    """The audit key: ``AIFAB_AUDIT_KEY`` (settings ``audit_key``), else the key file.

    Args:
        create_with_unkeyed: when given and no key exists, create the key file (mode 0600)
            recording that many unkeyed events before it; otherwise return None.

    Raises:
        AuditKeyMissingError: asked to create a key while the metadata DB is a team's shared
            one (each process would make its own).
    """
    settings = get_settings()
    configured = settings.audit_key
    if configured is not None and configured.get_secret_value():
        return AuditKey(configured.get_secret_value().encode("utf-8"))
    path = key_path()
    if path.exists():
        return _read_key_file(path)
    if create_with_unkeyed is None:
        return None
    if settings.team_db:
        raise AuditKeyMissingError(
            "AIFAB_AUDIT_KEY is not set: on a shared metadata DB every machine, Ray node and "
            "pod needs the team's audit key (from a secret) to write audit events; aifab does "
            "not make one per directory"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{new_id('key')}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"key": secrets.token_hex(32), "unkeyed": create_with_unkeyed}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, path)  # atomic and refuses to replace: a racing creator's key wins
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return _read_key_file(path)


def mac(key: AuditKey, payload: Any) -> str:
    """HMAC-SHA256 (hex) of the canonical JSON of ``payload``."""
    return hmac.new(key.secret, canonical_json(payload).encode("utf-8"), hashlib.sha256).hexdigest()


def _anchor_payload(a: dict[str, Any]) -> list[Any]:
    return ["anchor", a["count"], a["hash"], a["unkeyed"], repr(float(a["ts"]))]


def make_anchor(key: AuditKey, count: int, head_hash: str, unkeyed: int) -> dict[str, Any]:
    """A MAC'd anchor: the chain had ``count`` events ending in ``head_hash``."""
    anchor = {"count": count, "hash": head_hash, "unkeyed": unkeyed, "ts": time.time()}
    return {**anchor, "mac": mac(key, _anchor_payload(anchor))}


def _store() -> Any:
    """The team's store when ``AIFAB_STORAGE_URI`` is set, else None (anchors in the file)."""
    if not get_settings().storage_uri:
        return None
    from aifab.core.storage import get_store

    return get_store()


def anchors_exist() -> bool:
    """Whether the workspace (or the team's store) holds any anchor yet."""
    store = _store()
    if store is None:
        return anchor_path().exists()
    if store.uri not in _anchored and store.list(ANCHOR_PREFIX):
        _anchored.add(store.uri)
    return store.uri in _anchored


def append_anchor(anchor: dict[str, Any], path: Path | None = None) -> str:
    """Append one anchor line (``O_APPEND``, fsynced) to ``path``.

    Without ``path``: to the workspace's file, or with a store, as a new object there.

    Returns:
        Where it went (the file, or the object's store key).
    """
    if path is None and (store := _store()) is not None:
        name = f"{ANCHOR_PREFIX}/{int(anchor['count']):012d}-{new_id('anchor')}.json"
        store.write_bytes(name, json.dumps(anchor, sort_keys=True).encode("utf-8"), once=True)
        _anchored.add(store.uri)
        return name
    path = path or anchor_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (json.dumps(anchor, sort_keys=True) + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return str(path)


def _valid(key: AuditKey | None, text: str) -> dict[str, Any] | None:
    """The anchor in ``text`` if its MAC holds under ``key``."""
    try:
        a = json.loads(text)
        ok = key is not None and hmac.compare_digest(a["mac"], mac(key, _anchor_payload(a)))
    except (ValueError, KeyError, TypeError):
        return None
    return a if ok else None


def read_anchors(key: AuditKey | None, path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The anchors of ``path`` whose MAC holds, and a problem per line that does not."""
    if not path.exists():
        return [], []
    good: list[dict[str, Any]] = []
    problems: list[str] = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        a = _valid(key, line)
        if a is not None:
            good.append(a)
        else:
            problems.append(
                f"{path.name}: anchor line {i} does not carry a valid MAC (forged or edited)"
            )
    return good, problems


def read_own_anchors(key: AuditKey | None) -> tuple[list[dict[str, Any]], list[str], str]:
    """The workspace's anchors (the store's with one), their problems, and where they are."""
    store = _store()
    if store is None:
        good, problems = read_anchors(key, anchor_path())
        return good, problems, anchor_path().name
    good, problems = [], []
    for name in store.list(ANCHOR_PREFIX):
        a = _valid(key, store.read_bytes(name).decode("utf-8", errors="replace"))
        if a is not None:
            good.append(a)
        else:
            problems.append(f"{name}: anchor does not carry a valid MAC (forged or edited)")
    return good, problems, f"{store.uri}/{ANCHOR_PREFIX}"
