"""The evaluation gate's measurements: accuracy, fairness and latency of a model on hold-out rows.

Both the champion and the candidate are loaded as served (the same handler code as the server)
and scored on the same rows; fairness comes from fairlearn over the declared sensitive column.
The judgement itself is :func:`aifab.ops.retrain_policy.gate`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from aifab.core.errors import AifabError, InvalidInputError
from aifab.ops.policy_spec import FairnessBound, GateSpec
from aifab.ops.retrain_policy import GateResult, gate

__all__ = ["evaluate_gate", "measure_model"]


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


def evaluate_gate(
    candidate: str, champion: str, spec: GateSpec
) -> tuple[GateResult, dict[str, Any]]:
    """Measure ``candidate`` and ``champion`` on the hold-out rows and judge the candidate.

    The hold-out set is ``spec.holdout`` or the candidate's own training data, rows of split
    ``spec.holdout_split``. A candidate that cannot load or be scored fails the gate; a champion
    that cannot be measured leaves only the bounds to meet.

    Returns:
        The judgement and what it was based on (``holdout``, ``candidate``, ``champion``
        measures, or ``error``).
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
    result = gate(
        champ if champ and "error" not in champ else None,
        cand,
        tolerance=spec.tolerance,
        fairness=fairness,
        latency_p99_ms=spec.latency_p99_ms,
    )
    return result, {"holdout": holdout.dataset, "candidate": cand, "champion": champ}
