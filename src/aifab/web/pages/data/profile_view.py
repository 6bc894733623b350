"""A version's column profile as a window of columns: statistics and one chart per column.

A version may have thousands of columns: a page shows :data:`COLUMNS_PER_PAGE` of them (numeric
histograms, top categories), never one canvas per column of the whole table.
"""

from __future__ import annotations

from typing import Any

from aifab.web import charts

__all__ = ["COLUMNS_PER_PAGE", "column_window"]

#: Columns (and so charts) shown on one page of a version.
COLUMNS_PER_PAGE = 24
#: Category labels under a bar are cut to this many characters (the table has the values).
LABEL_CHARS = 24


def _label(value: object) -> str:
    text = str(value)
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def _chart(name: str, col: dict[str, Any]) -> dict[str, Any] | None:
    hist = col.get("histogram")
    if hist and any(hist.get("counts") or ()):
        return charts.histogram(hist["edges"], {"rows": hist["counts"]}, x_label=name)
    top = col.get("top_values")
    if top:
        labels = [_label(v) for v, _ in top]
        return charts.bars(labels, {"rows": [n for _, n in top]}, x_label=name)
    return None


def _summary(col: dict[str, Any]) -> str:
    """The column's main statistics in one line (the chart shows the distribution)."""
    kind = col.get("kind")
    if kind == "numeric" and col.get("min") is not None:
        return f"min {col['min']:.4g} · mean {col['mean']:.4g} · max {col['max']:.4g}"
    if kind == "string" and col.get("mean_length") is not None:
        return f"mean length {col['mean_length']:.3g} · max length {col['max_length']}"
    if kind == "temporal" and col.get("min") is not None:
        return f"{col['min']} … {col['max']}"
    return ""


def column_window(
    schema: list[dict[str, Any]], profile: dict[str, Any], offset: int
) -> dict[str, Any]:
    """Columns ``offset`` .. ``offset + COLUMNS_PER_PAGE`` of a version, with their charts.

    Returns:
        ``{"columns": [{"index", "name", "type", "kind", "null_share", "distinct", "summary",
        "chart", "chart_id"}], "offset", "total", "prev", "next"}`` (prev/next: offsets or None).
    """
    total = len(schema)
    offset = min(max(0, offset), max(0, total - 1))
    stats = profile.get("columns", {})
    shown = []
    for index in range(offset, min(total, offset + COLUMNS_PER_PAGE)):
        name = schema[index]["name"]
        col = stats.get(name, {})
        shown.append(
            {
                "index": index,
                "name": name,
                "type": schema[index]["type"],
                "kind": col.get("kind", ""),
                "null_share": col.get("null_share"),
                "distinct": col.get("distinct"),
                "nonfinite": (col.get("nan_count") or 0)
                + (col.get("posinf_count") or 0)
                + (col.get("neginf_count") or 0),
                "summary": _summary(col),
                "chart": _chart(name, col),
                "chart_id": f"col-chart-{index}",
            }
        )
    return {
        "columns": shown,
        "offset": offset,
        "total": total,
        "prev": max(0, offset - COLUMNS_PER_PAGE) if offset > 0 else None,
        "next": offset + COLUMNS_PER_PAGE if offset + COLUMNS_PER_PAGE < total else None,
    }
