"""``/ui/data/NAME/diff``: two versions side by side (``aifab.data.diff``), picked in a form."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from aifab.core.errors import NotFoundError
from aifab.data import diff, ensure_profile, list_version_summaries, resolve
from aifab.web import charts
from aifab.web.auth import Viewer, viewer
from aifab.web.render import page
from aifab.web.routing import UiRoute

__all__ = ["router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)

#: Columns whose profile changes are listed (a wide table may change in thousands).
CHANGES_SHOWN = 100
_STATS = ("null_share", "distinct", "mean", "std", "min", "max")
#: Changed columns drawn side by side (quantiles of numbers, shares of top values).
COLUMN_CHARTS = 6
#: Categories drawn per column chart (the union of both sides' top values).
CATEGORIES = 12


def _shares(col: dict[str, Any], rows: int) -> dict[str, float]:
    return {str(v): n / rows for v, n in col.get("top_values") or []} if rows else {}


def _column_chart(
    col: str, a: dict[str, Any], b: dict[str, Any], refs: tuple[str, str], rows: tuple[int, int]
) -> dict[str, Any] | None:
    """One column of both versions on one chart: quantile curves, or top-value shares."""
    qa, qb = a.get("quantiles") or {}, b.get("quantiles") or {}
    if qa and qb:
        keys = sorted(set(qa) & set(qb), key=float)
        labels = [f"p{round(float(k) * 100)}" for k in keys]
        series = {refs[0]: [qa[k] for k in keys], refs[1]: [qb[k] for k in keys]}
        return charts.line(labels, series, y_label=col, x_label="quantile")
    counts = [n for col_ in (a, b) for _, n in col_.get("top_values") or []]
    if max(counts, default=0) <= 1:
        return None  # nothing to compare: no values, or unique keys (each seen once)
    sa, sb = _shares(a, rows[0]), _shares(b, rows[1])
    labels = list(dict.fromkeys([*sa, *sb]))[:CATEGORIES]
    series = {refs[0]: [sa.get(k, 0.0) for k in labels], refs[1]: [sb.get(k, 0.0) for k in labels]}
    return charts.bars(labels, series, y_label="share of rows", x_label=col)


def _column_charts(ref_a: str, ref_b: str, columns: list[str]) -> list[dict[str, Any]]:
    """Charts of the first :data:`COLUMN_CHARTS` changed columns that have something to draw."""
    va, vb = resolve(ref_a), resolve(ref_b)
    pa, pb = ensure_profile(va).get("columns", {}), ensure_profile(vb).get("columns", {})
    out: list[dict[str, Any]] = []
    for col in columns:
        spec = _column_chart(
            col, pa.get(col, {}), pb.get(col, {}), (va.ref, vb.ref), (va.num_rows, vb.num_rows)
        )
        if spec is not None:
            out.append({"id": f"diff-col-{len(out)}", "column": col, "spec": spec})
        if len(out) == COLUMN_CHARTS:
            break
    return out


def _defaults(name: str) -> tuple[str, str]:
    """The previous and the latest version of ``name`` (the latest twice if it has one)."""
    recent = list_version_summaries(name, limit=2)
    if not recent:
        raise NotFoundError(f"dataset {name!r} has no versions")
    return recent[-1]["ref"], recent[0]["ref"]


def _refs(name: str, a: str, b: str) -> tuple[str, str]:
    # A bare number means a version of this dataset; anything else is a full reference.
    default_a, default_b = _defaults(name)
    full = [f"{name}@{x}" if x.isdigit() else x for x in (a.strip(), b.strip())]
    return full[0] or default_a, full[1] or default_b


def _compare(name: str, a: str, b: str) -> dict[str, Any]:
    ref_a, ref_b = _refs(name, a, b)
    result = diff(ref_a, ref_b)
    changes = list(result["profile_changes"].items())
    rows = [
        {"column": col, "stats": [(k, *delta[k]) for k in _STATS if k in delta]}
        for col, delta in changes[:CHANGES_SHOWN]
    ]
    chart = charts.bars(
        ["rows", "only in this side"],
        {
            result["a"]: [result["rows"]["a"], result.get("rows_only_in_a", 0)],
            result["b"]: [result["rows"]["b"], result.get("rows_only_in_b", 0)],
        },
        y_label="rows",
    )
    return {
        "a": ref_a,
        "b": ref_b,
        "result": result,
        "changes": rows,
        "changes_total": len(changes),
        "rows_chart": chart,
        "column_charts": _column_charts(ref_a, ref_b, [col for col, _ in changes]),
    }


@router.get("/ui/data/{name}/diff")
async def diff_page(request: Request, name: str, who: Viewer = Depends(viewer)) -> Response:
    """Compare versions ``a`` and ``b`` (numbers of this dataset, or ``NAME@N`` of any)."""
    args = request.query_params
    data = await asyncio.to_thread(_compare, name, args.get("a", ""), args.get("b", ""))
    return page(request, "data/diff.html", name=name, **data)
