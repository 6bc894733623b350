"""Feature engineering: fit a :class:`FeatureSpec` on training rows, build the features dataset.

The fit sees only rows whose split column equals the train value (all rows, recorded as
``fitted_on_all_rows``, when there is no split column). The fitted transform is saved as a JSON
artifact under ``artifacts/features/<digest>.json`` and recorded in the feature-set table; the
features dataset is built by the same single projection that serves new rows.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
from sqlalchemy import select

from aifab.core.audit import record_event
from aifab.core.config import as_config
from aifab.core.db import session_scope
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.core.storage import local_file, mirror_file
from aifab.core.workspace import get_workspace
from aifab.data import lake
from aifab.data.catalog import VersionInfo, commit_query, resolve
from aifab.data.feature_ops import check_columns, fit_params
from aifab.data.feature_spec import FeatureSpec
from aifab.data.feature_transform import FeatureTransform
from aifab.data.label_functions import LABEL_COLUMNS
from aifab.data.tables import DatasetRow, FeatureSetRow, VersionRow

__all__ = [
    "FeatureResult",
    "FeatureSpec",
    "FeatureTransform",
    "fit_features",
    "list_feature_sets",
    "load_feature_transform",
]

_DIGEST = re.compile(r"^[0-9a-f]{6,64}$")


@dataclass(frozen=True)
class FeatureResult:
    """What :func:`fit_features` produced."""

    transform: FeatureTransform
    artifact_path: Path
    version: VersionInfo


def _passthrough(spec: FeatureSpec, columns: list[str]) -> list[str]:
    if spec.passthrough is None:
        return [c for c in (spec.split_column, *LABEL_COLUMNS) if c in columns]
    for c in spec.passthrough:
        if c not in columns:
            raise InvalidInputError(
                f"feature spec: passthrough: column {c!r} not found (columns: {', '.join(columns)})"
            )
    return list(dict.fromkeys(spec.passthrough))


def _fit(
    v: VersionInfo, spec: FeatureSpec, name: str, con: duckdb.DuckDBPyConnection
) -> FeatureTransform:
    types = {c["name"]: c["type"] for c in v.schema}
    check_columns(spec, types)
    passthrough = _passthrough(spec, v.columns)
    has_split = spec.split_column in types
    where = (
        f"CAST({lake.sql_ident(spec.split_column)} AS VARCHAR) = "
        f"{lake.sql_string(spec.train_value)}"
        if has_split
        else None
    )
    if spec.engine == "ray":
        from aifab.data.engines.ray_features import fit_params_on_ray

        params, train_rows = fit_params_on_ray(v, spec, where)
    else:
        params, train_rows = fit_params(con, spec, v.scan_sql(), where)
    used = dict.fromkeys([*passthrough, *(f.column for f in spec.features)])
    return FeatureTransform(
        name=name,
        spec=spec,
        params=params,
        input_schema=[{"name": c, "type": types[c]} for c in used],
        passthrough=passthrough,
        fitted_on={
            "dataset": v.dataset,
            "version": v.version,
            "ref": v.ref,
            "version_id": v.id,
            "content_hash": v.content_hash,
        },
        fitted_on_all_rows=not has_split,
        train_rows=train_rows,
    )


def _artifact_rel(digest: str) -> str:
    return f"artifacts/features/{digest}.json"


def _version_transform(ft: FeatureTransform) -> dict[str, Any]:
    """What the features dataset version records about how it was made."""
    return {
        "kind": "features",
        "feature_set": ft.digest,
        "artifact": _artifact_rel(ft.digest),
        "spec": ft.spec.model_dump(mode="json"),
        "fitted_on_all_rows": ft.fitted_on_all_rows,
        "train_rows": ft.train_rows,
    }


def _record(ft: FeatureTransform, rel_path: str) -> None:
    """Add the feature-set row and its audit event (once per digest)."""
    with session_scope() as s:
        if s.scalar(select(FeatureSetRow.id).where(FeatureSetRow.digest == ft.digest)):
            return
        s.add(
            FeatureSetRow(
                name=ft.name,
                digest=ft.digest,
                fitted_on=ft.fitted_on["version_id"],
                path=rel_path,
                spec=ft.spec.model_dump(mode="json"),
            )
        )
        record_event(
            s,
            "features.fit",
            f"feature_set:{ft.name}",
            {"digest": ft.digest, "fitted_on": ft.fitted_on["ref"], "output": ft.output},
        )


def fit_features(
    ref: str, spec: FeatureSpec | Path | str | Mapping[str, Any], *, output: str | None = None
) -> FeatureResult:
    """Fit features on the training rows of ``ref`` and commit the features dataset.

    Args:
        ref: the input dataset (``NAME`` or ``NAME@VERSION``).
        spec: a :class:`FeatureSpec`, a YAML path or a mapping.
        output: name of the features dataset and feature set (default ``<dataset>.features``).

    Returns:
        The fitted transform, its artifact path and the committed features version.

    Raises:
        InvalidInputError: bad spec, a missing column, a column of the wrong type, or no
            training rows.
    """
    cfg = as_config(FeatureSpec, spec, source="feature spec")
    v = resolve(ref)
    name = output or f"{v.dataset}.features"
    con = lake.connect(sandboxed=True)
    try:
        ft = _fit(v, cfg, name, con)
        if cfg.engine == "ray":
            from aifab.data.engines.ray_features import commit_features_on_ray

            result = commit_features_on_ray(ft, v, name, _version_transform(ft))
        else:
            ft.register(con)
            result = commit_query(
                name,
                ft.select_sql(v.scan_sql(), v.columns),
                source=f"features({v.ref})",
                transform=_version_transform(ft),
                parents=[v],
                con=con,
            )
    except duckdb.Error as exc:
        raise lake.sql_error("feature spec", exc) from None
    ft = dataclasses.replace(ft, output=result.version.ref)
    path = ft.save(get_workspace().root / _artifact_rel(ft.digest))
    mirror_file(_artifact_rel(ft.digest))  # named by its digest: the same bytes from any writer
    _record(ft, _artifact_rel(ft.digest))
    return FeatureResult(transform=ft, artifact_path=path, version=result.version)


def _row_path(row: FeatureSetRow) -> Path:
    p = Path(row.path)
    return p if p.is_absolute() else local_file(row.path)


def load_feature_transform(ref: str | Path) -> FeatureTransform:
    """Load a fitted transform by artifact path, digest (or a prefix of 6+) or feature-set name.

    A name gives the newest feature set of that name.

    Raises:
        NotFoundError: nothing matches.
        InvalidInputError: an ambiguous digest prefix or an unreadable artifact.
    """
    text = str(ref)
    if isinstance(ref, Path) or text.endswith(".json") or Path(text).is_file():
        return FeatureTransform.load(Path(text))
    with session_scope() as s:
        row = None
        if _DIGEST.fullmatch(text):
            rows = list(
                s.scalars(
                    select(FeatureSetRow).where(FeatureSetRow.digest.startswith(text)).limit(2)
                )
            )
            if len(rows) > 1:
                raise InvalidInputError(f"digest prefix {text!r} is ambiguous; give more of it")
            row = rows[0] if rows else None
        if row is None:
            row = s.scalar(
                select(FeatureSetRow)
                .where(FeatureSetRow.name == text)
                .order_by(FeatureSetRow.id.desc())
                .limit(1)
            )
        if row is None:
            raise NotFoundError(f"feature set {text!r} not found (see 'aifab data feature-sets')")
        path = _row_path(row)
    return FeatureTransform.load(path)


def list_feature_sets(limit: int = 100) -> list[dict[str, Any]]:
    """Fitted feature sets, newest first: name, digest, fitted-on version, features, artifact."""
    with session_scope() as s:
        rows = s.execute(
            select(FeatureSetRow, DatasetRow.name, VersionRow.version)
            .join(VersionRow, VersionRow.id == FeatureSetRow.fitted_on)
            .join(DatasetRow, DatasetRow.id == VersionRow.dataset_id)
            .order_by(FeatureSetRow.id.desc())
            .limit(limit)
        ).all()
        return [
            {
                "name": r.name,
                "digest": r.digest,
                "fitted_on": f"{ds}@{ver}",
                "features": len(r.spec.get("features", [])),
                "path": str(_row_path(r)),
                "created_at": r.created_at,
            }
            for r, ds, ver in rows
        ]
