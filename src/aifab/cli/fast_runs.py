"""``runs list`` and ``models list`` without MLflow: plain SQL on the workspace's MLflow DB.

Importing MLflow takes 3-7 s, nearly all of those commands' time. Where the tracking store is
the workspace's own SQLite file at the schema revision the installed MLflow makes
(:data:`MLFLOW_SCHEMA_REVISION`; a test checks it), these functions run the queries MLflow's
SQLAlchemy store runs for :func:`aifab.track.list_runs` and :func:`aifab.track.list_models`
and return exactly what those return; tests compare the two on one store. Anywhere else
(another tracking URI, an older or newer schema, MLflow workspaces turned on, paging or
filtering the listing does not cover) they return None and the service function answers.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from aifab.core.sqlite_read import TRACKING_URI, open_at_revision, workspace_db_path

#: The Alembic revision of the MLflow schema these queries were written against.
MLFLOW_SCHEMA_REVISION = "dc11669786a5"
#: MLflow's single-tenant workspace, the only one read here.
_WORKSPACE = "default"
#: MLflow's ``search_experiments`` and ``search_registered_models`` default page sizes.
_EXPERIMENTS_PAGE, _MODELS_PAGE = 1000, 100
_PROMPT_TAG = "mlflow.prompt.is_prompt"
_DELETED_VERSION = "Deleted_Internal"


def _open() -> Any:
    if any(k.startswith("MLFLOW_WORKSPACE") or k == "MLFLOW_ENABLE_WORKSPACES" for k in os.environ):
        return open_at_revision(None, "", "")
    path = workspace_db_path("mlflow.db", TRACKING_URI)
    return open_at_revision(path, "alembic_version", MLFLOW_SCHEMA_REVISION)


def _seconds(ms: int | None) -> float | None:
    return ms / 1000.0 if ms else None


def list_runs(experiment: str | None = None, limit: int = 50) -> list[dict[str, Any]] | None:
    """:func:`aifab.track.list_runs` across experiments, or None to call it instead."""
    if experiment is not None or not 1 <= limit <= _EXPERIMENTS_PAGE:
        return None
    with _open() as conn:
        if conn is None:
            return None
        experiments = _active_experiments(conn)
        if experiments is None:
            return None
        return _runs(conn, experiments, limit)


def _active_experiments(conn: sqlite3.Connection) -> dict[str, str] | None:
    rows = conn.execute(
        "SELECT experiment_id, name FROM experiments"
        " WHERE lifecycle_stage = 'active' AND workspace = ? LIMIT ?",
        (_WORKSPACE, _EXPERIMENTS_PAGE + 1),
    ).fetchall()
    if len(rows) > _EXPERIMENTS_PAGE:  # MLflow would list runs of its first page only
        return None
    return {str(exp_id): name for exp_id, name in rows}


def _runs(
    conn: sqlite3.Connection, experiments: dict[str, str], limit: int
) -> list[dict[str, Any]]:
    if not experiments:
        return []
    marks = ",".join("?" * len(experiments))
    # MLflow's order for "attributes.start_time DESC": nulls last, then newest, then run id.
    runs = conn.execute(
        "SELECT run_uuid, experiment_id, name, status, start_time, end_time FROM runs"
        f" WHERE experiment_id IN ({marks}) AND lifecycle_stage = 'active'"
        " ORDER BY start_time IS NULL, start_time DESC, run_uuid LIMIT ?",
        (*experiments, limit),
    ).fetchall()
    metrics: dict[str, dict[str, float]] = {run[0]: {} for run in runs}
    if runs:
        ids = ",".join("?" * len(runs))
        for key, value, is_nan, run_id in conn.execute(
            f"SELECT key, value, is_nan, run_uuid FROM latest_metrics WHERE run_uuid IN ({ids})",
            list(metrics),
        ):
            metrics[run_id][key] = float("nan") if is_nan else value
    out = []
    for run_id, exp_id, name, status, start_ms, end_ms in runs:
        start, end = _seconds(start_ms), _seconds(end_ms)
        out.append(
            {
                "id": run_id,
                "experiment": experiments.get(str(exp_id), str(exp_id)),
                "name": name,
                "status": status,
                "start_time": start,
                "end_time": end,
                "duration_s": round(end - start, 3) if start and end else None,
                "metrics": metrics[run_id],
            }
        )
    return out


def list_models() -> list[dict[str, Any]] | None:
    """:func:`aifab.track.list_models`, or None to call it instead."""
    with _open() as conn:
        if conn is None:
            return None
        models = conn.execute(
            "SELECT name, description, last_updated_time FROM registered_models"
            " WHERE workspace = ? AND name NOT IN (SELECT name FROM registered_model_tags"
            "   WHERE workspace = ? AND key = ? AND value = 'true')"
            " ORDER BY name LIMIT ?",
            (_WORKSPACE, _WORKSPACE, _PROMPT_TAG, _MODELS_PAGE),
        ).fetchall()
        return [_model(conn, *row) for row in models]


def _model(
    conn: sqlite3.Connection, name: str, description: str | None, updated_ms: int
) -> dict[str, Any]:
    where = "WHERE workspace = ? AND name = ?"
    versions = [
        int(v)
        for (v,) in conn.execute(
            f"SELECT version FROM model_versions {where} AND current_stage != ?",
            (_WORKSPACE, name, _DELETED_VERSION),
        )
    ]
    aliases = conn.execute(
        f"SELECT alias, version FROM registered_model_aliases {where}", (_WORKSPACE, name)
    ).fetchall()
    tags = conn.execute(
        f"SELECT key, value FROM registered_model_tags {where}", (_WORKSPACE, name)
    ).fetchall()
    return {
        "name": name,
        "latest": max(versions, default=None),
        "versions": len(versions),
        "aliases": {alias: int(version) for alias, version in aliases},
        "description": description,
        "tags": dict(tags),
        "updated_at": updated_ms / 1000.0,
    }
