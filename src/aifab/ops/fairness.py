"""Fairness of a classifier over declared sensitive features, with fairlearn, on its test split.

Selection rate, true and false positive rates and accuracy by group, and the demographic
parity and equalized odds differences; :func:`fairness_gate` turns a report into a pass/fail
decision with reasons (a promotion gate can use it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aifab.core.errors import InvalidInputError
from aifab.ops.explain.model import TabularModel, dataset_rows, load_tabular, one_class_warning

__all__ = ["MISSING", "fairness_gate", "fairness_report"]

#: The group of rows whose sensitive value is NULL.
MISSING = "(missing)"
_RATES = ("count", "selection_rate", "true_positive_rate", "false_positive_rate", "accuracy")


def _positive(model: TabularModel, positive: str | None) -> str:
    if positive is not None:
        if positive not in model.classes:
            raise InvalidInputError(
                f"positive {positive!r}: not a class of {model.ref} ({', '.join(model.classes)})"
            )
        return positive
    # The rarer class is the event of interest (churn, fraud, default) more often than not.
    counts = {c: model.test_labels.count(c) for c in model.classes}
    return min(model.classes, key=lambda c: (counts[c], c))


def _groups(raw: list[dict[str, Any]], sensitive: list[str], where: str) -> list[str]:
    if not sensitive:
        raise InvalidInputError("sensitive: name at least one column, e.g. --sensitive country")
    have = set(raw[0]) if raw else set()
    missing = [c for c in sensitive if c not in have]
    if missing:
        raise InvalidInputError(
            f"sensitive: {', '.join(map(repr, missing))} not in the rows of {where} "
            f"(columns: {', '.join(sorted(have))})"
        )
    return [
        " | ".join(MISSING if r.get(c) is None else str(r.get(c)) for c in sensitive) for r in raw
    ]


def fairness_report(
    ref: str,
    sensitive: list[str],
    *,
    positive: str | None = None,
    min_group_rows: int = 5,
    dataset: str | None = None,
) -> dict[str, Any]:
    """Group metrics of model version ``ref`` on its test split.

    Args:
        ref: ``NAME@VERSION`` or ``NAME@ALIAS`` of a tabular classifier.
        sensitive: dataset columns defining groups (need not be model inputs); several
            columns make intersectional groups such as ``DE | basic``.
        positive: the class counted as selected (default: the rarer class on the test split).
        min_group_rows: groups with fewer test rows are shown but left out of the two
            differences (one row makes any rate 0 or 1).
        dataset: a labelled dataset version (``NAME@VERSION``) to evaluate on instead of the
            model's test split.

    Returns:
        ``model``, ``data``, ``positive``, ``sensitive``, ``rows``, ``overall``, ``by_group``
        (count, selection_rate, true_positive_rate, false_positive_rate, accuracy),
        ``demographic_parity_difference`` and ``equalized_odds_difference`` (over groups of
        at least ``min_group_rows``; None when fewer than two such groups), ``excluded``,
        ``warnings`` (e.g. the model predicts one class for every row).

    Raises:
        InvalidInputError: no or unknown sensitive columns, an unknown positive class, a
            dataset without the label column or without rows the model takes.
        NotFoundError: no such model or dataset version.
    """
    from fairlearn.metrics import (
        MetricFrame,
        count,
        demographic_parity_difference,
        equalized_odds_difference,
        false_positive_rate,
        selection_rate,
        true_positive_rate,
    )
    from sklearn.metrics import accuracy_score

    model = load_tabular(ref)
    pos = _positive(model, positive)
    records, labels, raw = model.test_records, model.test_labels, model.test_raw
    where = f"the test split of {model.ref}"
    if dataset is not None:
        records, labels, raw = dataset_rows(model, dataset)
        where = f"dataset {dataset}"
        if not records:
            raise InvalidInputError(f"{where}: no labelled rows the model takes")
    groups = _groups(raw, sensitive, where)
    predicted = np.asarray(model.classes)[model.proba(records).argmax(axis=1)]
    y_true = (np.asarray(labels) == pos).astype(int)
    y_pred = (predicted == pos).astype(int)
    metrics = dict(
        zip(
            _RATES,
            (count, selection_rate, true_positive_rate, false_positive_rate, accuracy_score),
            strict=True,
        )
    )
    frame = MetricFrame(metrics=metrics, y_true=y_true, y_pred=y_pred, sensitive_features=groups)
    by_group: list[dict[str, Any]] = [
        {"group": str(g), **{k: _num(v) for k, v in row.items()}, "count": int(row["count"])}
        for g, row in frame.by_group.to_dict(orient="index").items()
    ]
    excluded = sorted(g["group"] for g in by_group if g["count"] < min_group_rows)
    keep = np.asarray([g not in excluded for g in groups])
    kept = [g for g, k in zip(groups, keep, strict=True) if k]
    enough = len(set(kept)) >= 2
    warning = one_class_warning(predicted, where)
    return {
        "model": model.ref,
        "data": where,
        "positive": pos,
        "sensitive": list(sensitive),
        "rows": len(groups),
        "overall": {k: _num(v) for k, v in frame.overall.to_dict().items()},
        "by_group": sorted(by_group, key=lambda g: (-int(g["count"]), str(g["group"]))),
        "excluded": excluded,
        "min_group_rows": min_group_rows,
        "demographic_parity_difference": _num(
            demographic_parity_difference(y_true[keep], y_pred[keep], sensitive_features=kept)
        )
        if enough
        else None,
        "equalized_odds_difference": _num(
            equalized_odds_difference(y_true[keep], y_pred[keep], sensitive_features=kept)
        )
        if enough
        else None,
        "warnings": [warning] if warning else [],
    }


def _num(value: Any) -> float | int | None:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None  # e.g. a group with no positives has no true positive rate
    return (
        int(value) if float(value).is_integer() and not isinstance(value, float) else float(value)
    )


def fairness_gate(
    report: dict[str, Any],
    *,
    max_demographic_parity: float | None = 0.1,
    max_equalized_odds: float | None = 0.1,
) -> tuple[bool, list[str]]:
    """Whether a fairness report is within bounds, and why not (pure).

    Args:
        report: from :func:`fairness_report`.
        max_demographic_parity: the largest allowed demographic parity difference (None: any).
        max_equalized_odds: the largest allowed equalized odds difference (None: any).
    """
    reasons = []
    checks = (
        ("demographic_parity_difference", max_demographic_parity),
        ("equalized_odds_difference", max_equalized_odds),
    )
    for name, bound in checks:
        value = report.get(name)
        if bound is not None and value is not None and not value <= bound:
            reasons.append(f"{name} {value:.4f} > {bound:g} over {', '.join(report['sensitive'])}")
    return not reasons, reasons
