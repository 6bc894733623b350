"""Monitors: create, list, run over a request-log window, store results, raise alerts.

A run measures data drift (against the model's training data, found through lineage),
prediction drift, labelled quality and service objectives; a window with no traffic, columns
missing from the log or a deleted reference are reported in the result, never raised.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from aifab.core.actor import current_actor
from aifab.core.audit import record_event
from aifab.core.config import load_yaml, parse_config
from aifab.core.db import session_scope
from aifab.core.errors import AifabError, ConflictError, InvalidInputError, NotFoundError
from aifab.core.names import SHORT_NAME, is_full_match
from aifab.ops.alert_rules import Rule, default_rules, evaluate
from aifab.ops.alerts import process_breaches
from aifab.ops.drift import DriftOptions, drift_report
from aifab.ops.monitor_spec import DriftSpec, MonitorSpec
from aifab.ops.tables import MonitorResultRow, MonitorRow
from aifab.ops.window import (
    feature_columns,
    labelled_accuracy,
    load_feedback,
    load_window,
    predicted_labels,
    slo_values,
)

if TYPE_CHECKING:
    from aifab.ops.reference import Reference

__all__ = [
    "create_monitor",
    "delete_monitor",
    "get_monitor",
    "list_monitors",
    "monitor_history",
    "run_monitor",
]


def _spec(spec: MonitorSpec | Path | str | Mapping[str, Any]) -> MonitorSpec:
    if isinstance(spec, MonitorSpec):
        return spec
    data = load_yaml(Path(spec)) if isinstance(spec, str | Path) else dict(spec)
    return parse_config(MonitorSpec, data, str(spec) if isinstance(spec, str | Path) else "monitor")


def _row_dict(row: MonitorRow) -> dict[str, Any]:
    return {
        "name": row.name,
        "deployment": row.deployment,
        "spec": row.spec,
        "created_by": row.created_by,
        "created_at": row.created_at,
    }


def create_monitor(name: str, spec: MonitorSpec | Path | str | Mapping[str, Any]) -> dict[str, Any]:
    """Create monitor ``name`` from a spec (a YAML path, a mapping or a MonitorSpec).

    Raises:
        InvalidInputError: a bad name or spec (the field is named).
        ConflictError: a monitor of that name exists.
    """
    if not is_full_match(SHORT_NAME, name):
        raise InvalidInputError(f"monitor name {name!r}: use letters, digits, '_', '-', '.'")
    cfg = _spec(spec)
    with session_scope() as s:
        if s.get(MonitorRow, name) is not None:
            raise ConflictError(f"monitor {name!r} exists")
        row = MonitorRow(
            name=name,
            deployment=cfg.deployment,
            spec=cfg.model_dump(mode="json"),
            created_by=current_actor(),
            created_at=time.time(),
        )
        s.add(row)
        record_event(s, "monitor.create", f"monitor:{name}", row.spec)
        return _row_dict(row)


def _get(s: Any, name: str) -> MonitorRow:
    row = s.get(MonitorRow, name)
    if row is None:
        have = ", ".join(s.scalars(select(MonitorRow.name).order_by(MonitorRow.name)))
        raise NotFoundError(f"no monitor {name!r} (monitors: {have or 'none'})")
    return row


def get_monitor(name: str) -> dict[str, Any]:
    """One monitor with its latest result (None before its first run)."""
    with session_scope() as s:
        out = _row_dict(_get(s, name))
        last = s.scalars(
            select(MonitorResultRow)
            .where(MonitorResultRow.monitor == name)
            .order_by(MonitorResultRow.id.desc())
            .limit(1)
        ).first()
        out["last_result"] = _result(last) if last else None
        return out


def list_monitors() -> list[dict[str, Any]]:
    """Every monitor, by name."""
    with session_scope() as s:
        return [_row_dict(r) for r in s.scalars(select(MonitorRow).order_by(MonitorRow.name))]


def delete_monitor(name: str) -> None:
    """Delete a monitor (its results and alerts stay in the history)."""
    with session_scope() as s:
        row = _get(s, name)
        record_event(s, "monitor.delete", f"monitor:{name}", row.spec)
        s.delete(row)


def _result(row: MonitorResultRow, full: bool = True) -> dict[str, Any]:
    out = {
        "id": row.id,
        "monitor": row.monitor,
        "ts": row.ts,
        "window_start": row.window_start,
        "window_end": row.window_end,
        "status": row.status,
        "values": row.values,
    }
    if full:
        out["report"] = row.report
    return out


def monitor_history(name: str, limit: int = 50, *, reports: bool = False) -> list[dict[str, Any]]:
    """A monitor's results, newest first (values only, or with each ``report`` if asked)."""
    with session_scope() as s:
        _get(s, name)
        q = (
            select(MonitorResultRow)
            .where(MonitorResultRow.monitor == name)
            .order_by(MonitorResultRow.id.desc())
            .limit(limit)
        )
        return [_result(r, full=reports) for r in s.scalars(q)]


def _drift(
    spec: MonitorSpec, model_ref: str, columns: dict[str, list[Any]], labels: list[str]
) -> tuple[dict[str, float], dict[str, Any]]:
    """Data and prediction drift values and report; a missing reference is a note, not a raise."""
    from aifab.ops.reference import describe, load_reference, reference_predictions

    d = spec.drift
    try:
        ref = load_reference(
            model_ref, dataset=d.reference, split=d.reference_split, max_rows=d.reference_rows
        )
    except AifabError as exc:
        return {}, {"error": f"no reference: {exc.message}"}
    ref_cols: dict[str, Any] = dict(ref.columns())
    skip = {ref.label, "split"}
    wanted = spec.features or [c for c in columns if c not in skip]
    kinds = dict(d.kinds)
    notes = _embed_columns(d, ref, ref_cols, columns, wanted, kinds)
    opts = DriftOptions(
        tests=tuple(d.tests),
        thresholds=d.thresholds,
        feature_thresholds=d.feature_thresholds,
        kinds=kinds,
        drift_share=d.drift_share,
        text_tests=tuple(d.text_tests),
        embedding_tests=tuple(d.embedding_tests),
        embedding_distance=d.embedding_distance,
        text_rows=d.text_rows,
        top_words=d.top_words,
    )
    report = drift_report(ref_cols, columns, opts, columns=wanted)
    report["reference"] = describe(ref)
    report["notes"] = notes
    values = {
        "drift_share": report["share"],
        "drifted_columns": float(len(report["drifted"])),
        "dataset_drift": float(report["dataset_drift"]),
    }
    for col, info in report["columns"].items():
        # Text and embedding scores as values: alert rules and /metrics can name them.
        for test in ("domain_classifier", "mean_distance"):
            if test in info.get("tests", {}):
                values[f"{test}:{col}"] = float(info["tests"][test]["value"])
    if d.prediction and labels:
        try:
            baseline = reference_predictions(ref)
        except AifabError as exc:
            report["prediction"] = {"error": f"no prediction baseline: {exc.message}"}
        else:
            pred = drift_report(
                {"prediction": baseline},
                {"prediction": labels},
                DriftOptions(kinds={"prediction": "categorical"}),
            )
            report["prediction"] = pred["columns"]["prediction"]
            values["prediction_drift"] = float(report["prediction"]["drift"])
    return values, report


def _embed_columns(
    d: DriftSpec,
    ref: Reference,
    ref_cols: dict[str, Any],
    columns: dict[str, list[Any]],
    wanted: list[str],
    kinds: dict[str, str],
) -> list[str]:
    """Add ``<column>:embedding`` of each ``embed_text`` column to both sides; notes on failures.

    The reference's vectors are cached per process; the window's are computed each run.
    """
    from aifab.ops.drift.embedding import embed_texts
    from aifab.ops.drift.text import sample, texts
    from aifab.ops.reference import reference_embeddings

    notes: list[str] = []
    for col in d.embed_text:
        if col not in ref_cols or col not in columns:
            continue  # the text column itself is reported missing
        cur, _ = texts(columns[col])
        try:
            ref_vectors = reference_embeddings(ref, col, d.embedding_model, d.embed_rows)
            cur_vectors = embed_texts(sample(cur, d.embed_rows, 1), d.embedding_model)
        except AifabError as exc:
            notes.append(f"{col}: not embedded: {exc.message}")
            continue
        key = f"{col}:embedding"
        ref_cols[key], columns[key], kinds[key] = ref_vectors, cur_vectors, "embedding"
        wanted.append(key)
    return notes


def _rules(spec: MonitorSpec) -> list[Rule]:
    rules = default_rules(
        quality_min=spec.quality.min_accuracy,
        min_labels=spec.quality.min_labels,
        latency_p99_ms=spec.objectives.latency_p99_ms,
        error_rate=spec.objectives.error_rate,
    )
    rules += [Rule(r.name, r.value, r.op, r.threshold, r.severity) for r in spec.rules]
    return rules


def measure(spec: MonitorSpec, start: float, end: float) -> tuple[dict[str, float], dict[str, Any]]:
    """Every value and the report of one window (no storing, no alerting)."""
    rows = load_window(spec.deployment, start, end)
    values: dict[str, float] = slo_values(rows)
    report: dict[str, Any] = {"notes": []}
    columns = feature_columns(rows)
    n = max((len(v) for v in columns.values()), default=0)
    values["rows"] = float(n)
    if not rows:
        report["notes"].append("no traffic in the window")
    elif n < spec.min_rows:
        report["notes"].append(f"{n} logged input rows (< min_rows {spec.min_rows}): no drift")
    elif spec.drift.enabled:
        try:
            from aifab.inference.deployments import get_deployment

            model_ref = get_deployment(spec.deployment)["model"]
        except NotFoundError as exc:
            report["notes"].append(exc.message)
        else:
            drift_values, report["drift"] = _drift(spec, model_ref, columns, predicted_labels(rows))
            values.update(drift_values)
            if "error" in report["drift"]:
                report["notes"].append(report["drift"]["error"])
            report["notes"].extend(report["drift"].pop("notes", []))
            for m in report["drift"].get("missing_columns", []):
                report["notes"].append(f"column {m['column']} missing from the {m['missing_from']}")
    ids = [str(r["request_id"]) for r in rows if r.get("request_id")]
    values.update(labelled_accuracy(rows, load_feedback(ids)))
    return values, report


def run_monitor(name: str, *, now: float | None = None) -> dict[str, Any]:
    """Run monitor ``name`` over the window ending ``now``; store the result; raise alerts.

    Returns:
        The stored result: ``status`` (``ok`` | ``breach`` | ``no_data`` | ``error``), the flat
        ``values``, the ``report`` (with ``notes`` on anything missing) and the ``alerts``
        this run fired or resolved.
    """
    with session_scope() as s:
        spec = MonitorSpec.model_validate(_get(s, name).spec)
    end = time.time() if now is None else now
    start = end - spec.window_s
    values, report = measure(spec, start, end)
    rules = _rules(spec)
    breaches = evaluate(rules, values)
    report["breaches"] = [b.__dict__ for b in breaches]
    if breaches:
        status = "breach"
    elif "drift" in report and "error" in report["drift"]:
        status = "error"
    else:
        status = "ok" if values.get("requests") else "no_data"
    with session_scope() as s:
        row = MonitorResultRow(
            monitor=name,
            ts=time.time(),
            window_start=start,
            window_end=end,
            status=status,
            values=values,
            report=report,
        )
        s.add(row)
        s.flush()
        result = _result(row)
    judged = [r.name for r in rules if r.value in values]
    sinks = [sk.model_dump() for sk in spec.sinks]
    result["alerts"] = process_breaches(name, spec.deployment, breaches, sinks, judged=judged)
    return result
