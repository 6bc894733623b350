"""The evaluation gate's measurements: accuracy, fairness and latency of a model on hold-out rows.

Both the champion and the candidate are loaded as served (the same handler code as the server)
and scored on the same rows, hold-out and recent labelled traffic of the deployment (request
log joined with feedback); fairness comes from fairlearn over the declared sensitive column.
The judgement itself is :func:`aifab.ops.policy.retrain.gate`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from aifab.core.errors import AifabError, InvalidInputError
from aifab.ops.policy.retrain import GateResult, gate
from aifab.ops.policy.spec import FairnessBound, GateSpec, RecentTrafficSpec

__all__ = ["evaluate_gate", "measure_model"]

#: The truth column of labelled traffic (a name no input column has).
_TRUTH = "__aifab_label__"


def _predict_all(handler: Any, records: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for i in range(0, len(records), 500):
        items = handler.decode({"records": records[i : i + 500]})
        out += [str(handler.encode(p).get("label")) for p in handler.predict(items)]
    return out


def _fairness(
    truth: list[str], pred: list[str], groups: list[Any], bound: FairnessBound, classes: list[str]
) -> dict[str, float]:
    from fairlearn.metrics import demographic_parity_difference, equalized_odds_difference

    positive = bound.positive or (classes[0] if classes else pred[0])
    y_true = np.array([t == positive for t in truth], dtype=int)
    y_pred = np.array([p == positive for p in pred], dtype=int)
    sf = np.array(["<missing>" if g is None else str(g) for g in groups])
    return {
        "demographic_parity_difference": float(
            demographic_parity_difference(y_true, y_pred, sensitive_features=sf)
        ),
        "equalized_odds_difference": float(
            equalized_odds_difference(y_true, y_pred, sensitive_features=sf)
        ),
    }


def _latency_p99(handler: Any, records: list[dict[str, Any]], calls: int) -> float:
    for rec in records[:3]:  # warm-up: first calls pay for lazy initialisation
        handler.predict(handler.decode({"records": [rec]}))
    times = []
    for i in range(calls):
        started = time.perf_counter()
        handler.predict(handler.decode({"records": [records[i % len(records)]]}))
        times.append((time.perf_counter() - started) * 1000.0)
    return float(np.percentile(times, 99))


def measure_model(
    model_ref: str,
    table: pa.Table,
    label: str,
    *,
    fairness: FairnessBound | None = None,
    latency_calls: int = 0,
) -> dict[str, Any]:
    """Score ``model_ref`` on the hold-out ``table`` (its ``label`` column is the truth).

    Returns:
        ``{"model", "rows", "accuracy", ...}`` plus fairness differences and ``latency_p99_ms``
        when asked for.

    Raises:
        InvalidInputError: the model cannot load or the rows lack its inputs or the label.
    """
    from aifab.inference.loading import load_served_model

    handler = load_served_model(model_ref).handler
    info: Mapping[str, Any] = handler.describe()
    names = [c["name"] for c in info.get("input_columns", [])]
    missing = [n for n in [*names, label] if n not in table.column_names]
    if missing:
        raise InvalidInputError(f"hold-out rows lack column {missing[0]!r} that {model_ref} needs")
    if table.num_rows == 0:
        raise InvalidInputError("the hold-out set has no rows")
    records = table.select(names).to_pylist()
    truth = [str(x) for x in table.column(label).to_pylist()]
    pred = _predict_all(handler, records)
    out: dict[str, Any] = {
        "model": model_ref,
        "rows": len(truth),
        "accuracy": float(np.mean([p == t for p, t in zip(pred, truth, strict=True)])),
    }
    if fairness is not None:
        if fairness.sensitive not in table.column_names:
            raise InvalidInputError(f"hold-out rows lack sensitive column {fairness.sensitive!r}")
        groups = table.column(fairness.sensitive).to_pylist()
        out.update(_fairness(truth, pred, groups, fairness, list(info.get("classes") or [])))
    if latency_calls:
        out["latency_p99_ms"] = _latency_p99(handler, records, latency_calls)
    return out


def _recent_traffic(
    candidate: str, champion: str, deployment: str | None, spec: RecentTrafficSpec
) -> tuple[tuple[dict[str, Any] | None, dict[str, Any]] | None, dict[str, Any]]:
    """Both models scored on ``deployment``'s recent labelled requests, if there are enough.

    Returns:
        ``(champion, candidate)`` measures for the gate (None: not judged) and the record of
        what was done and why.
    """
    from aifab.ops.feedback import labelled_traffic

    if not spec.enabled or deployment is None:
        return None, {"used": False, "why": "disabled"}
    rows = labelled_traffic(deployment, time.time() - spec.window_s, limit=spec.max_rows)
    info: dict[str, Any] = {"labelled": len(rows), "min_labels": spec.min_labels}
    if len(rows) < spec.min_labels:
        why = f"only {len(rows)} labelled requests (< {spec.min_labels}): hold-out only"
        return None, {**info, "used": False, "why": why}
    try:
        table = pa.Table.from_pylist([{**r["record"], _TRUTH: r["label"]} for r in rows])
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:  # a column logged with mixed types
        return None, {**info, "used": False, "why": f"logged rows unusable: {exc}"}
    try:
        cand = measure_model(candidate, table, _TRUTH)
    except AifabError as exc:
        cand = {"error": exc.message}
    try:
        champ: dict[str, Any] | None = measure_model(champion, table, _TRUTH)
    except AifabError as exc:
        champ = {"error": exc.message}
    info.update(used=True, candidate=cand, champion=champ)
    return (champ if champ and "error" not in champ else None, cand), info


def evaluate_gate(
    candidate: str, champion: str, spec: GateSpec, deployment: str | None = None
) -> tuple[GateResult, dict[str, Any]]:
    """Measure ``candidate`` and ``champion`` on the hold-out rows and judge the candidate.

    The hold-out set is ``spec.holdout`` or the candidate's own training data, rows of split
    ``spec.holdout_split``. A candidate that cannot load or be scored fails the gate; a champion
    that cannot be measured leaves only the bounds to meet. With ``deployment``, both are also
    scored on its recent requests whose labels arrived (``spec.traffic``), when there are enough.

    Returns:
        The judgement and what it was based on (``holdout``, ``candidate``, ``champion``
        measures and ``traffic``, or ``error``).
    """
    from aifab.ops.reference import _training_dataset, load_reference

    try:
        dataset, label, _ = _training_dataset(candidate)
        holdout = load_reference(
            candidate, dataset=spec.holdout or dataset, split=spec.holdout_split
        )
        if not label:
            raise InvalidInputError(f"{candidate}: its run records no label column")
        cand = measure_model(
            candidate,
            holdout.table,
            label,
            fairness=spec.fairness,
            latency_calls=spec.latency_calls,
        )
    except AifabError as exc:
        return gate(None, {}, tolerance=spec.tolerance), {"error": exc.message}
    try:
        champ: dict[str, Any] | None = measure_model(champion, holdout.table, label)
    except AifabError as exc:
        champ = {"error": exc.message}
    fairness = None
    if spec.fairness is not None:
        fairness = {
            "demographic_parity_difference": spec.fairness.max_demographic_parity_difference,
            "equalized_odds_difference": spec.fairness.max_equalized_odds_difference,
        }
    traffic, traffic_info = _recent_traffic(candidate, champion, deployment, spec.traffic)
    result = gate(
        champ if champ and "error" not in champ else None,
        cand,
        tolerance=spec.tolerance,
        fairness=fairness,
        latency_p99_ms=spec.latency_p99_ms,
        traffic=traffic,
    )
    basis = {"holdout": holdout.dataset, "candidate": cand, "champion": champ}
    return result, {**basis, "traffic": traffic_info}
