"""The two distributions behind one drift score: a feature's reference beside its live window.

Drift results store test scores, not the values compared; this module reads both sides again
(the reference the run named, and the run's request-log window) and bins them on shared edges.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
from sqlalchemy import select

from aifab.core.db import session_scope
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.ops.drift.report import _floats, column_kind
from aifab.ops.monitor_spec import MonitorSpec
from aifab.ops.reference import load_reference
from aifab.ops.tables import MonitorResultRow, MonitorRow
from aifab.ops.window import feature_columns, load_window

__all__ = ["drift_distribution"]

#: Categories shown at most; the rarer ones are summed as "(other)".
MAX_CATEGORIES = 20


def _stored(monitor: str, result_id: int) -> tuple[MonitorSpec, dict[str, Any]]:
    with session_scope() as s:
        mon = s.get(MonitorRow, monitor)
        if mon is None:
            raise NotFoundError(f"no monitor {monitor!r}")
        row = s.scalars(
            select(MonitorResultRow).where(
                MonitorResultRow.id == result_id, MonitorResultRow.monitor == monitor
            )
        ).first()
        if row is None:
            raise NotFoundError(f"monitor {monitor!r} has no result {result_id}")
        result = {
            "id": row.id,
            "window_start": row.window_start,
            "window_end": row.window_end,
            "report": row.report or {},
        }
        return MonitorSpec.model_validate(mon.spec), result


def _shares(counts: np.ndarray) -> list[float]:
    total = float(counts.sum())
    return [float(c) / total if total else 0.0 for c in counts]


def _numeric(ref: Any, live: list[Any], bins: int) -> dict[str, Any]:
    r, c = _floats(ref), _floats(live)
    r, c = r[np.isfinite(r)], c[np.isfinite(c)]
    both = np.concatenate([r, c])
    if both.size == 0:
        return {"kind": "numerical", "edges": [], "reference": [], "live": []}
    edges = np.histogram_bin_edges(both, bins=bins)
    return {
        "kind": "numerical",
        "edges": [float(e) for e in edges],
        "reference": _shares(np.histogram(r, edges)[0]),
        "live": _shares(np.histogram(c, edges)[0]),
    }


def _categorical(ref: list[Any], live: list[Any]) -> dict[str, Any]:
    rc = Counter("(missing)" if v is None else str(v) for v in ref)
    cc = Counter("(missing)" if v is None else str(v) for v in live)
    top = [k for k, _ in (rc + cc).most_common(MAX_CATEGORIES)]
    labels = top + (["(other)"] if len(rc | cc) > len(top) else [])

    def shares(counts: Counter[str]) -> list[float]:
        values = [counts.get(k, 0) for k in top]
        if len(labels) > len(top):
            values.append(sum(counts.values()) - sum(values))
        return _shares(np.asarray(values, dtype=float))

    return {"kind": "categorical", "labels": labels, "reference": shares(rc), "live": shares(cc)}


def drift_distribution(
    monitor: str, result_id: int, feature: str, *, bins: int = 20
) -> dict[str, Any]:
    """Reference and live shares of ``feature`` for one stored monitor result, on shared bins.

    The reference is the one the run compared against (dataset and model named in its report);
    the live side is the run's request-log window, read again.

    Returns:
        ``{"feature", "kind", "edges"`` (numerical, n+1 values; ``"dates"``: they are days
        since 1970) or ``"labels"`` (categorical),
        ``"reference", "live"`` (shares per bin), ``"n_ref", "n_live", "reference_source",
        "window_start", "window_end"}``.

    Raises:
        NotFoundError: unknown monitor or result, a run without drift, a feature it did not
            compare, or a reference that is gone (named).
        InvalidInputError: ``bins`` outside 2-100.
    """
    if not 2 <= bins <= 100:
        raise InvalidInputError(f"bins {bins}: expected 2-100")
    spec, result = _stored(monitor, result_id)
    drift = result["report"].get("drift") or {}
    if feature not in drift.get("columns", {}):
        compared = ", ".join(drift.get("columns", {})) or "none"
        raise NotFoundError(
            f"result {result_id} of {monitor!r} compared no feature {feature!r} "
            f"(compared: {compared})"
        )
    source = drift.get("reference") or {}
    ref = load_reference(
        str(source.get("model")),
        dataset=source.get("dataset"),
        split=spec.drift.reference_split,
        max_rows=spec.drift.reference_rows,
    )
    if feature not in ref.table.column_names:
        raise NotFoundError(f"reference {ref.dataset} has no column {feature!r} any more")
    ref_values = ref.table.column(feature)
    window = load_window(spec.deployment, result["window_start"], result["window_end"])
    live = feature_columns(window).get(feature, [])
    kind = spec.drift.kinds.get(feature) or column_kind(ref_values)
    if kind == "numerical":
        out = _numeric(ref_values, live, bins)
        # Dates are compared as days since 1970: say so, so the bins can be labelled as dates.
        out["dates"] = pa.types.is_date(ref_values.type) or pa.types.is_timestamp(ref_values.type)
    else:
        out = _categorical(ref_values.to_pylist(), live)
    return {
        "feature": feature,
        **out,
        "n_ref": len(ref_values),
        "n_live": len(live),
        "reference_source": f"{ref.dataset} (model {ref.model})",
        "window_start": result["window_start"],
        "window_end": result["window_end"],
    }
