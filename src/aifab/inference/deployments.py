"""The deployment store: which model (and canary) is served under which name, with what settings.

Service functions validate, write the ``deployments`` table and audit every change; running
servers reconcile from the table (``generation`` tells them what changed) and report back.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy import select

from aifab.core.actor import current_actor
from aifab.core.audit import record_event
from aifab.core.db import session_scope
from aifab.core.errors import ConflictError, InvalidInputError, NotFoundError
from aifab.inference.deployment_settings import (
    BUILTIN_MODELS,
    SETTINGS,
    check_name,
    check_settings,
    check_source,
    default_name,
    is_path,
)
from aifab.inference.tables import DeploymentRow

#: What a server may report about a deployment.
STATUSES = ("pending", "loading", "ready", "failed")

__all__ = [
    "BUILTIN_MODELS",
    "STATUSES",
    "check_source",
    "default_name",
    "create_deployment",
    "delete_deployment",
    "get_deployment",
    "list_deployments",
    "promote_canary",
    "report_status",
    "rollback_canary",
    "update_deployment",
]


def _to_dict(row: DeploymentRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "model": row.model_ref,
        "canary": row.canary_ref,
        "canary_weight": row.canary_weight,
        "sticky_header": row.sticky_header,
        "replicas": row.replicas,
        "max_batch_size": row.max_batch_size,
        "max_wait_ms": row.max_wait_ms,
        "backend": row.backend,
        "options": dict(row.options or {}),
        "generation": row.generation,
        "status": row.status,
        "status_reason": row.status_reason,
        "serving": dict(row.serving or {}),
        "created_by": row.created_by,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def _settings(row: DeploymentRow) -> dict[str, Any]:
    d = _to_dict(row)
    return {k: d[k] for k in SETTINGS}


def _apply(row: DeploymentRow, s: dict[str, Any]) -> None:
    row.model_ref, row.canary_ref = s["model"], s["canary"]
    row.canary_weight, row.sticky_header = s["canary_weight"], s["sticky_header"]
    row.replicas, row.max_batch_size = s["replicas"], s["max_batch_size"]
    row.max_wait_ms, row.backend, row.options = s["max_wait_ms"], s["backend"], s["options"]


def _get(session: Any, name: str, *, lock: bool = False) -> DeploymentRow:
    """The deployment; ``lock`` holds its row to commit (changes bump its generation)."""
    row = session.get(DeploymentRow, name, with_for_update=lock or None)
    if row is None:
        have = ", ".join(session.scalars(select(DeploymentRow.name).order_by(DeploymentRow.name)))
        raise NotFoundError(f"no deployment {name!r} (deployments: {have or 'none'})")
    return row


def create_deployment(
    source: str,
    *,
    name: str | None = None,
    replicas: int = 1,
    max_batch_size: int = 1,
    max_wait_ms: float = 0.0,
    backend: str = "torch",
    canary: str | None = None,
    canary_weight: float = 0.0,
    sticky_header: str | None = None,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Put a model behind ``/v1/...`` under ``name`` (default: the model's name).

    Returns:
        The deployment (``status`` is ``pending`` until a server has loaded it).

    Raises:
        InvalidInputError: a bad name or setting, or a source that is not a model.
        NotFoundError: the registry ref does not resolve.
        ConflictError: a deployment of that name exists.
    """
    model = check_source(source)
    name = check_name(name) if name is not None else default_name(model)
    settings = check_settings(
        {
            "model": model,
            "canary": check_source(canary, "canary") if canary is not None else None,
            "canary_weight": canary_weight,
            "sticky_header": sticky_header,
            "replicas": replicas,
            "max_batch_size": max_batch_size,
            "max_wait_ms": max_wait_ms,
            "backend": backend,
            "options": options,
        }
    )
    now = time.time()
    try:
        with session_scope() as s:
            if s.get(DeploymentRow, name) is not None:
                raise ConflictError(f"deployment {name!r} exists: use 'deployments update'")
            row = DeploymentRow(name=name, created_by=current_actor(), created_at=now)
            _apply(row, settings)
            row.generation, row.status, row.serving, row.updated_at = 1, "pending", {}, now
            s.add(row)
            s.flush()
            record_event(s, "deployment.create", f"deployment:{name}", settings)
            return _to_dict(row)
    except sa_exc.IntegrityError:  # a concurrent create of the same name won
        raise ConflictError(f"deployment {name!r} exists: use 'deployments update'") from None


def update_deployment(name: str, **changes: Any) -> dict[str, Any]:
    """Change settings of a deployment; a real change bumps its generation (servers reload).

    Args:
        name: the deployment.
        **changes: any of ``model``, ``canary`` (``None`` removes it), ``canary_weight``,
            ``sticky_header``, ``replicas``, ``max_batch_size``, ``max_wait_ms``, ``backend``,
            ``options``. Settings equal to the current ones change nothing (no new generation,
            no audit event), so repeating an update is harmless.

    Raises:
        InvalidInputError: an unknown or bad setting; NotFoundError: no such deployment.
    """
    unknown = sorted(set(changes) - set(SETTINGS))
    if unknown:
        raise InvalidInputError(
            f"unknown deployment setting(s) {', '.join(unknown)} (known: {', '.join(SETTINGS)})"
        )
    if "model" in changes:
        changes["model"] = check_source(changes["model"])
    if changes.get("canary") is not None:
        changes["canary"] = check_source(changes["canary"], "canary")
    elif "canary" in changes and "canary_weight" not in changes:
        changes["canary_weight"] = 0.0  # removing the canary removes its traffic share
    with session_scope() as s:
        row = _get(s, name, lock=True)
        current = _settings(row)
        wanted = check_settings({**current, **changes})
        if wanted == current:
            return _to_dict(row)
        _bump(row, wanted)
        diff = {k: v for k, v in wanted.items() if current[k] != v}
        record_event(s, "deployment.update", f"deployment:{name}", diff)
        return _to_dict(row)


def _bump(row: DeploymentRow, settings: dict[str, Any]) -> None:
    _apply(row, settings)
    row.generation += 1
    row.status, row.status_reason, row.updated_at = "pending", None, time.time()


#: How much lower a canary's recorded test accuracy may be before a manual promotion needs
#: ``force`` (the retrain gate's default tolerance).
PROMOTE_TOLERANCE = 0.02
#: The metric a manual promotion compares, as the training recipes record it.
PROMOTE_METRIC = "test_accuracy"


def _recorded(ref: str) -> float | None:
    """``PROMOTE_METRIC`` of the run that produced a registered model version, if recorded."""
    from aifab.track.registry import resolve_model
    from aifab.track.runs import get_run

    if not _registry_ref(ref):
        return None
    run_id = resolve_model(ref).get("run_id")
    if not run_id:
        return None
    try:
        value = get_run(str(run_id))["metrics"].get(PROMOTE_METRIC)
    except NotFoundError:  # a version registered from files, without a run
        return None
    return None if value is None else float(value)


def _worse_by(primary: str, canary: str) -> str | None:
    """Why promoting ``canary`` over ``primary`` needs ``force``; None when it does not."""
    before, after = _recorded(primary), _recorded(canary)
    if before is None or after is None or after >= before - PROMOTE_TOLERANCE:
        return None
    return (
        f"the canary {canary} is worse than the primary {primary} on {PROMOTE_METRIC}: "
        f"{after:.4f} vs {before:.4f} ({after - before:+.4f})"
    )


def promote_canary(name: str, *, force: bool = False) -> dict[str, Any]:
    """Make the canary the primary model and drop the canary.

    When the primary is an alias (``churn@champion``) of the canary's model, the alias moves to
    the canary's version instead, so everything else following the alias moves too.

    Args:
        name: the deployment.
        force: promote even when the canary's recorded test accuracy is lower than the
            primary's by more than :data:`PROMOTE_TOLERANCE` (a passed retrain gate, which
            judged both on the same rows, promotes with it).

    Raises:
        ConflictError: the deployment has no canary, or the canary is worse and ``force`` is
            not set (the message says by how much); NotFoundError: no such deployment.
    """
    from aifab.track.registry import parse_ref, resolve_model, set_alias

    with session_scope(readonly=True) as s:
        row = _get(s, name)
        primary, canary = row.model_ref, row.canary_ref
    if canary is None:
        raise ConflictError(f"deployment {name!r} has no canary to promote")
    worse = None if force else _worse_by(primary, canary)
    if worse:
        raise ConflictError(
            f"{worse}; to make it the primary anyway, force it (CLI --force, API ?force=true)"
        )
    new_primary = canary
    moved: dict[str, Any] | None = None
    if _registry_ref(primary) and _registry_ref(canary):
        p_name, p_sel = parse_ref(primary)
        c = resolve_model(canary)
        if p_sel is not None and not p_sel.isdigit() and p_sel != "latest" and p_name == c["name"]:
            moved = set_alias(p_name, p_sel, c["version"])
            new_primary = primary
    with session_scope() as s:
        row = _get(s, name, lock=True)
        settings = {**_settings(row), "model": new_primary, "canary": None, "canary_weight": 0.0}
        _bump(row, settings)
        params = {"from": primary, "to": canary, "alias_moved": moved is not None}
        record_event(s, "deployment.promote", f"deployment:{name}", params)
        return _to_dict(row)


def _registry_ref(source: str) -> bool:
    return not source.startswith("builtin:") and not is_path(source)


def rollback_canary(name: str) -> dict[str, Any]:
    """Drop the canary: all traffic goes back to the primary model.

    Raises:
        ConflictError: the deployment has no canary; NotFoundError: no such deployment.
    """
    with session_scope() as s:
        row = _get(s, name, lock=True)
        if row.canary_ref is None:
            raise ConflictError(f"deployment {name!r} has no canary to roll back")
        dropped = row.canary_ref
        _bump(row, {**_settings(row), "canary": None, "canary_weight": 0.0})
        record_event(s, "deployment.rollback", f"deployment:{name}", {"canary": dropped})
        return _to_dict(row)


def delete_deployment(name: str) -> None:
    """Remove a deployment (servers unload it; its request log is kept).

    Raises:
        NotFoundError: no such deployment.
    """
    with session_scope() as s:
        row = _get(s, name, lock=True)
        record_event(s, "deployment.delete", f"deployment:{name}", _settings(row))
        s.delete(row)


def get_deployment(name: str) -> dict[str, Any]:
    """One deployment. Raises NotFoundError when there is none of that name."""
    with session_scope(readonly=True) as s:
        return _to_dict(_get(s, name))


def list_deployments() -> list[dict[str, Any]]:
    """Every deployment, by name."""
    with session_scope(readonly=True) as s:
        rows = s.scalars(select(DeploymentRow).order_by(DeploymentRow.name))
        return [_to_dict(r) for r in rows]


def report_status(
    name: str,
    generation: int,
    status: str,
    reason: str | None = None,
    serving: dict[str, Any] | None = None,
) -> bool:
    """Record what a server made of a deployment (not audited: it is observation, not change).

    Args:
        name: the deployment.
        generation: the generation the server loaded (or failed to); reports about an older
            generation than the row's are ignored, so a slow load cannot mask a newer one.
        status: ``pending`` | ``loading`` | ``ready`` | ``failed``.
        reason: why it failed (shown by ``deployments show``).
        serving: what is being served, e.g. ``{"primary": "m@3", "canary": "m@4"}``.

    Returns:
        Whether the report was recorded (False: the deployment is gone or has moved on).
    """
    if status not in STATUSES:
        raise InvalidInputError(f"status {status!r}: use one of {', '.join(STATUSES)}")
    with session_scope() as s:
        row = s.get(DeploymentRow, name, with_for_update=True)
        if row is None or row.generation != generation:
            return False
        row.status, row.status_reason = status, reason
        if serving is not None:
            row.serving = dict(serving)
        return True
