"""Retrain policies: create, list, show, history (the loop itself is :mod:`aifab.ops.loop`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import select

from aifab.core.actor import current_actor
from aifab.core.audit import record_event
from aifab.core.config import load_yaml, parse_config
from aifab.core.db import session_scope
from aifab.core.errors import ConflictError, InvalidInputError, NotFoundError
from aifab.core.names import SHORT_NAME, is_full_match
from aifab.ops.policy.spec import PolicySpec
from aifab.ops.tables import PolicyRow, PolicyRunRow

__all__ = ["create_policy", "get_policy", "list_policies", "load_policy_spec", "policy_history"]


def load_policy_spec(spec: PolicySpec | Path | str | Mapping[str, Any]) -> PolicySpec:
    """Validate a policy; read a retrain config given as a file (relative to the policy file).

    The stored policy then holds the very config it will run.
    """
    base = Path.cwd()
    if isinstance(spec, PolicySpec):
        cfg = spec
    elif isinstance(spec, str | Path):
        path = Path(spec)
        base = path.resolve().parent
        cfg = parse_config(PolicySpec, load_yaml(path), str(path))
    else:
        cfg = parse_config(PolicySpec, dict(spec), "policy")
    if isinstance(cfg.retrain.config, str):
        path = (base / cfg.retrain.config).resolve()
        if not path.is_file():
            raise InvalidInputError(f"retrain.config: no such file {cfg.retrain.config}")
        data = load_yaml(path)
        if not isinstance(data, dict):
            raise InvalidInputError(f"retrain.config {path}: expected a mapping")
        cfg = cfg.model_copy(update={"retrain": cfg.retrain.model_copy(update={"config": data})})
    return cfg


def create_policy(name: str, spec: PolicySpec | Path | str | Mapping[str, Any]) -> dict[str, Any]:
    """Create policy ``name`` (audited).

    Raises:
        InvalidInputError: a bad name or spec (field named); ConflictError: name taken.
    """
    if not is_full_match(SHORT_NAME, name):
        raise InvalidInputError(f"policy name {name!r}: use letters, digits, '_', '-', '.'")
    cfg = load_policy_spec(spec)
    with session_scope() as s:
        if s.get(PolicyRow, name) is not None:
            raise ConflictError(f"policy {name!r} exists")
        row = PolicyRow(
            name=name,
            spec=cfg.model_dump(mode="json"),
            created_by=current_actor(),
            created_at=time.time(),
        )
        s.add(row)
        record_event(s, "policy.create", f"policy:{name}", row.spec)
        return {"name": name, "spec": row.spec, "created_by": row.created_by}


def _get(s: Any, name: str) -> PolicyRow:
    row = s.get(PolicyRow, name)
    if row is None:
        have = ", ".join(s.scalars(select(PolicyRow.name).order_by(PolicyRow.name)))
        raise NotFoundError(f"no policy {name!r} (policies: {have or 'none'})")
    return row


def get_policy(name: str) -> dict[str, Any]:
    """One policy and its latest run."""
    with session_scope() as s:
        row = _get(s, name)
        last = s.scalars(
            select(PolicyRunRow)
            .where(PolicyRunRow.policy == name)
            .order_by(PolicyRunRow.id.desc())
            .limit(1)
        ).first()
        return {
            "name": row.name,
            "spec": row.spec,
            "created_by": row.created_by,
            "created_at": row.created_at,
            "last_run": _run(last) if last else None,
        }


def list_policies() -> list[dict[str, Any]]:
    """Every policy, by name."""
    with session_scope() as s:
        return [
            {
                "name": r.name,
                "deployment": r.spec["deployment"],
                "model": r.spec["model"],
                "monitor": r.spec["trigger"]["monitor"],
                "created_by": r.created_by,
            }
            for r in s.scalars(select(PolicyRow).order_by(PolicyRow.name))
        ]


def _run(r: PolicyRunRow) -> dict[str, Any]:
    return {
        "id": r.id,
        "policy": r.policy,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "outcome": r.outcome,
        "record": r.record,
    }


def policy_history(name: str, limit: int = 20) -> list[dict[str, Any]]:
    """A policy's runs, newest first; each record explains why it ended as it did."""
    with session_scope() as s:
        _get(s, name)
        q = (
            select(PolicyRunRow)
            .where(PolicyRunRow.policy == name)
            .order_by(PolicyRunRow.id.desc())
            .limit(limit)
        )
        return [_run(r) for r in s.scalars(q)]


def last_started(name: str) -> float | None:
    """When the policy last started a retraining (skipped runs do not count)."""
    with session_scope() as s:
        return s.scalars(
            select(PolicyRunRow.started_at)
            .where(PolicyRunRow.policy == name, PolicyRunRow.outcome != "skipped")
            .order_by(PolicyRunRow.id.desc())
            .limit(1)
        ).first()
