"""Labels as dataset versions: labeling-function votes, human labels and the labeling queue.

:func:`label` writes ``label``, ``label_confidence`` and ``label_source`` in one DuckDB query.
Precedence per row: the newest human label (confidence 1, source ``human:<labeler>``), then a
label imported earlier (source ``import``), then the weighted vote (source ``lf``); rows where
every function abstains keep a NULL label. Files of labels are joined on by
:mod:`aifab.data.label_import`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from sqlalchemy import exc as sa_exc
from sqlalchemy import select

from aifab.core.actor import current_actor
from aifab.core.audit import record_event
from aifab.core.config import as_config
from aifab.core.db import session_scope
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data import lake
from aifab.data.catalog import CommitResult, VersionInfo, commit_query, resolve
from aifab.data.label_functions import (
    LABEL_COLUMNS,
    LabelSpec,
    check_functions,
    fires_sql,
    function_stats,
    vote_sql,
)
from aifab.data.label_import import ImportResult, import_labels, item_columns, keyed_sql
from aifab.data.tables import HumanLabel

__all__ = [
    "ImportResult",
    "LabelSpec",
    "import_labels",
    "label",
    "label_history",
    "label_queue_next",
    "submit_label",
]

_HUMAN = "__aifab_human"


def _check_column(v: VersionInfo, field: str, column: str | None) -> None:
    if column is not None and column not in v.columns:
        raise InvalidInputError(
            f"label spec: {field}: column {column!r} not found in {v.ref} "
            f"(columns: {', '.join(v.columns)})"
        )


def _human_labels(datasets: Iterable[str]) -> pa.Table:
    """The newest human label per item key (over the given dataset names)."""
    newest: dict[str, tuple[str, str]] = {}
    with session_scope() as s:
        rows = s.scalars(
            select(HumanLabel)
            .where(HumanLabel.dataset.in_(sorted(set(datasets))))
            .order_by(HumanLabel.created_at, HumanLabel.id)
        )
        for r in rows:
            newest[r.item_key] = (r.label, r.labeler)
    return pa.table(
        {
            "item_key": pa.array(list(newest), pa.string()),
            "label": pa.array([lab for lab, _ in newest.values()], pa.string()),
            "labeler": pa.array([who for _, who in newest.values()], pa.string()),
        }
    )


def _label_sql(v: VersionInfo, spec: LabelSpec, with_humans: bool, keyed: str = "") -> str:
    """The labeled rows of ``keyed`` (default: ``v``'s rows with ``__row`` and ``__key``)."""
    imported = (
        "CASE WHEN label_source = 'import' THEN label END"
        if set(LABEL_COLUMNS) <= set(v.columns)
        else "NULL::VARCHAR"
    )
    base = (
        f"SELECT *, {imported} AS __imp, {', '.join(fires_sql(spec))} "
        f"FROM ({keyed or keyed_sql(v, spec.key)})"
    )
    old = [c for c in LABEL_COLUMNS if c in v.columns]
    drop = ", ".join(
        ["__row", "__key", "__imp", "__lf_label", "__lf_conf", *old]
        + [f"__lf{i}" for i in range(len(spec.functions))]
    )
    human_label = "h.label" if with_humans else "NULL::VARCHAR"
    human_src = "'human:' || h.labeler" if with_humans else "NULL::VARCHAR"
    join = f" LEFT JOIN {_HUMAN} h ON t.__key = h.item_key" if with_humans else ""
    return (
        f"SELECT t.* EXCLUDE ({drop}), "
        f"coalesce({human_label}, __imp, __lf_label) AS label, "
        f"CASE WHEN {human_label} IS NOT NULL OR __imp IS NOT NULL THEN 1.0::DOUBLE "
        f"ELSE __lf_conf END AS label_confidence, "
        f"CASE WHEN {human_label} IS NOT NULL THEN {human_src} "
        f"WHEN __imp IS NOT NULL THEN 'import' WHEN __lf_label IS NOT NULL THEN 'lf' "
        f"END AS label_source "
        f"FROM ({vote_sql(spec, f'({base})')}) t{join} ORDER BY t.__row"
    )


def label_transform(spec: LabelSpec, stats: dict[str, Any]) -> dict[str, Any]:
    """The lineage record of a labeled version."""
    return {
        "kind": "label",
        "method": "functions",
        "key": spec.key,
        "text_column": spec.text_column,
        "spec": spec.model_dump(mode="json"),
        "stats": stats,
    }


def label(
    ref: str, spec: LabelSpec | Path | str | Mapping[str, Any], *, output: str | None = None
) -> CommitResult:
    """Label a dataset with labeling functions and human labels; commit a new version.

    Args:
        ref: the dataset to label (``NAME`` or ``NAME@VERSION``).
        spec: a :class:`LabelSpec`, a YAML path or a mapping.
        output: dataset name for the result (default: a new version of the input dataset).
            Human labels submitted to either the input or the output name are applied.

    Returns:
        The committed version; its transform records the spec, per-function coverage and
        conflict counts, and how many human labels were applied.

    Raises:
        InvalidInputError: bad spec, a column that does not exist, a bad regex or SQL rule.
    """
    cfg = as_config(LabelSpec, spec, source="label spec")
    v = resolve(ref)
    _check_column(v, "key", cfg.key)
    _check_column(v, "text_column", cfg.text_column)
    if cfg.engine == "ray":
        from aifab.data.engines.ray_label import label_on_ray

        return label_on_ray(v, cfg, output or v.dataset)
    con = lake.connect(sandboxed=True)  # labeling functions are user-written SQL
    rel = v.scan_sql()
    check_functions(con, rel, v.columns, cfg)
    name = output or v.dataset
    humans = _human_labels({v.dataset, name})
    con.register(_HUMAN, humans)
    try:
        stats = function_stats(con, rel, cfg)
        stats["human"] = _count_matches(con, v, cfg.key) if humans.num_rows else 0
        return commit_query(
            name,
            _label_sql(v, cfg, humans.num_rows > 0),
            source=f"label({v.ref})",
            transform=label_transform(cfg, stats),
            parents=[v],
            con=con,
        )
    except duckdb.Error as exc:
        raise lake.sql_error("label spec", exc) from None


def _count_matches(con: duckdb.DuckDBPyConnection, v: VersionInfo, key: str | None) -> int:
    row = con.execute(
        f"SELECT count(*) FROM ({keyed_sql(v, key)}) t JOIN {_HUMAN} h ON t.__key = h.item_key"
    ).fetchall()[0]
    return int(row[0]) if row else 0


def _human_keys(name: str) -> pa.Table:
    with session_scope() as s:
        keys = sorted(set(s.scalars(select(HumanLabel.item_key).where(HumanLabel.dataset == name))))
    return pa.table({"item_key": pa.array(keys, pa.string())})


def label_queue_next(name: str, n: int = 10) -> list[dict[str, Any]]:
    """The next items of ``name``'s latest version that still need a human label.

    Items without a human label come lowest ``label_confidence`` first (unlabeled first),
    then in row order. Each item has ``key``, ``text`` (when a text column is known) and,
    when the version has label columns, ``label``, ``label_confidence`` and ``label_source``.
    """
    if n < 1:
        raise InvalidInputError(f"n must be at least 1 (got {n})")
    v = resolve(name)
    key, text = item_columns(v)
    con = lake.connect()
    con.register(_HUMAN, _human_keys(v.dataset))
    cols = ["__key AS key"]
    if text is not None:
        cols.append(f"{lake.sql_ident(text)} AS text")
    labeled = set(LABEL_COLUMNS) <= set(v.columns)
    if labeled:
        cols += list(LABEL_COLUMNS)
    order = "label_confidence ASC NULLS FIRST, __row" if labeled else "__row"
    table = con.sql(
        f"SELECT {', '.join(cols)} FROM ({keyed_sql(v, key)}) "
        f"WHERE __key NOT IN (SELECT item_key FROM {_HUMAN}) ORDER BY {order} LIMIT {int(n)}"
    ).to_arrow_table()
    return table.to_pylist()


def _check_item(v: VersionInfo, item_key: str) -> None:
    key, _ = item_columns(v)
    row = (
        lake.connect()
        .execute(f"SELECT count(*) FROM ({keyed_sql(v, key)}) WHERE __key = ?", [item_key])
        .fetchall()[0]
    )
    if not row or not row[0]:
        by = f"key column {key!r}" if key else "row number"
        raise NotFoundError(f"item {item_key!r} not found in {v.ref} (by {by})")


def submit_label(name: str, item_key: str, label: str) -> None:
    """Store (or replace) the current actor's label for one item; record an audit event.

    The label overrides labeling-function votes the next time :func:`label` runs.

    Raises:
        NotFoundError: the dataset or the item does not exist.
        InvalidInputError: an empty or over-long label.
    """
    label = label.strip()
    if not label or len(label) > 200:
        raise InvalidInputError("label must be 1 to 200 characters")
    v = resolve(name)
    item_key = str(item_key)
    _check_item(v, item_key)
    labeler = current_actor()
    for attempt in range(5):
        try:
            with session_scope() as s:
                row = s.scalar(
                    select(HumanLabel).where(
                        HumanLabel.dataset == v.dataset,
                        HumanLabel.item_key == item_key,
                        HumanLabel.labeler == labeler,
                    )
                )
                if row is None:
                    s.add(
                        HumanLabel(
                            dataset=v.dataset,
                            item_key=item_key,
                            label=label,
                            labeler=labeler,
                            created_at=time.time(),
                        )
                    )
                else:
                    row.label, row.created_at = label, time.time()
                record_event(
                    s,
                    "label.submit",
                    f"dataset:{v.dataset}",
                    {"item_key": item_key, "label": label},
                )
            return
        except sa_exc.IntegrityError:  # a concurrent submit took the row or the audit slot
            time.sleep(0.01 * (attempt + 1))
    raise RuntimeError(f"could not store the label for {item_key!r}: too much contention")


def label_history(name: str, limit: int = 100) -> list[dict[str, Any]]:
    """Who labeled what and when for dataset ``name``, newest first."""
    v = resolve(name)
    with session_scope() as s:
        rows = s.scalars(
            select(HumanLabel)
            .where(HumanLabel.dataset == v.dataset)
            .order_by(HumanLabel.created_at.desc(), HumanLabel.id.desc())
            .limit(limit)
        )
        return [
            {
                "item_key": r.item_key,
                "label": r.label,
                "labeler": r.labeler,
                "created_at": r.created_at,
            }
            for r in rows
        ]
