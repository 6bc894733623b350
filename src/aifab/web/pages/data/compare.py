"""``/ui/data/NAME/diff``: two versions side by side (``aifab.data.diff``), picked in a form."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from aifab.core.errors import NotFoundError
from aifab.data import diff, list_version_summaries
from aifab.web import charts
from aifab.web.auth import Viewer, viewer
from aifab.web.render import page
from aifab.web.routing import UiRoute

__all__ = ["router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)

#: Columns whose profile changes are listed (a wide table may change in thousands).
CHANGES_SHOWN = 100
_STATS = ("null_share", "distinct", "mean", "std", "min", "max")


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
    }


@router.get("/ui/data/{name}/diff")
async def diff_page(request: Request, name: str, who: Viewer = Depends(viewer)) -> Response:
    """Compare versions ``a`` and ``b`` (numbers of this dataset, or ``NAME@N`` of any)."""
    args = request.query_params
    data = await asyncio.to_thread(_compare, name, args.get("a", ""), args.get("b", ""))
    return page(request, "data/diff.html", name=name, **data)
