"""Evidently as a baseline (tests and bench only): per-column drift flags of DataDriftPreset.

Evidently 0.7 imports a helper pandas 3 removed; the shim below supplies it before the import
(only a data-integrity test of Evidently's uses it, not drift detection).
"""

from __future__ import annotations

from typing import Any


def _shim_pandas() -> None:
    import pandas as pd
    import pandas.core.dtypes.common as common

    if not hasattr(common, "infer_dtype_from_object"):
        common.infer_dtype_from_object = lambda obj: pd.api.types.pandas_dtype(obj).type  # type: ignore[attr-defined]


def evidently_drift_flags(
    ref: Any, cur: Any, numerical: list[str], categorical: list[str]
) -> dict[str, bool]:
    """Column -> drifted, as Evidently's DataDriftPreset decides with its default tests."""
    _shim_pandas()
    from evidently import DataDefinition, Dataset, Report
    from evidently.presets import DataDriftPreset

    dd = DataDefinition(numerical_columns=numerical, categorical_columns=categorical)
    snap = Report([DataDriftPreset()]).run(
        Dataset.from_pandas(cur, data_definition=dd), Dataset.from_pandas(ref, data_definition=dd)
    )
    flags = {}
    for m in snap.dict()["metrics"]:
        cfg = m.get("config", {})
        if not cfg.get("type", "").endswith("ValueDrift"):
            continue
        method, value, threshold = cfg.get("method", ""), m["value"], cfg["threshold"]
        p_value = "p_value" in method or "p-value" in method.lower()
        flags[cfg["column"]] = bool(value < threshold) if p_value else bool(value >= threshold)
    return flags


def evidently_text_drift(ref: list[str], cur: list[str]) -> bool:
    """Whether Evidently's DataDriftPreset finds one text column drifted (domain classifier)."""
    _shim_pandas()
    import pandas as pd
    from evidently import DataDefinition, Dataset, Report
    from evidently.presets import DataDriftPreset

    dd = DataDefinition(text_columns=["text"])
    snap = Report([DataDriftPreset()]).run(
        Dataset.from_pandas(pd.DataFrame({"text": cur}), data_definition=dd),
        Dataset.from_pandas(pd.DataFrame({"text": ref}), data_definition=dd),
    )
    for m in snap.dict()["metrics"]:
        if m.get("config", {}).get("type", "").endswith("DriftedColumnsCount"):
            return bool(m["value"]["count"] >= 1)
    raise AssertionError("Evidently reported no drifted-columns count")


def evidently_embedding_drift(ref: Any, cur: Any, method: str) -> bool:
    """Evidently's embedding drift verdict: ``model`` (domain classifier, AUC > 0.55) or
    ``distance`` (euclidean distance of means against its bootstrap percentile)."""
    _shim_pandas()
    import pandas as pd
    from evidently.legacy.metrics.data_drift.embedding_drift_methods import distance, model

    fn = model() if method == "model" else distance(dist="euclidean", bootstrap=True)
    _, drift, _ = fn(pd.DataFrame(cur), pd.DataFrame(ref))
    return bool(drift)
