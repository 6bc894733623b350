"""``/ui/data``: datasets, versions, one version (schema, profile, preview), quarantine.

Every list is paged in the service query, never by loading everything.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter, Depends, Request, Response

from aifab.data import (
    cell_thumbnail,
    count_quarantine,
    ensure_profile,
    head,
    list_datasets,
    list_quarantine,
    list_version_summaries,
    resolve,
)
from aifab.web.auth import Viewer, viewer
from aifab.web.pages.data.links import parse_version, window
from aifab.web.pages.data.profile_view import column_window
from aifab.web.paging import Page
from aifab.web.render import SECURITY_HEADERS, page
from aifab.web.routing import UiRoute

__all__ = ["router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)

#: Rows of a version shown as its preview.
PREVIEW_ROWS = 10
#: Quarantined rows shown on a version's page (the quarantine page pages through all).
QUARANTINE_SAMPLE = 10
#: A cell of a preview or a quarantined record is cut to this many characters.
CELL_CHARS = 200


def _cell(value: Any) -> str:
    if value is None:
        return "∅"
    plain = isinstance(value, dict | list)  # records and nested values read as JSON
    text = json.dumps(value, default=str, ensure_ascii=False) if plain else str(value)
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def _quarantine(name: str, offset: int, limit: int) -> dict[str, Any]:
    rows = list_quarantine(name, limit=limit, offset=offset)
    for row in rows:
        row["record_text"] = _cell(row["record"]) if row["record"] is not None else ""
    counts = count_quarantine(name)
    return {"rows": rows, "by_rule": sorted(counts.items()), "total": sum(counts.values())}


def _thumb_url(v: Any, column: str, row: int) -> dict[str, str]:
    """A preview cell of an image column: its thumbnail's URL (the template shows an <img>)."""
    base = f"/ui/data/{quote(v.dataset, safe='')}/versions/{v.version}/thumbnail"
    return {"thumbnail": f"{base}?{urlencode({'column': column, 'row': row})}"}


def _version(ref: str, col_offset: int) -> dict[str, Any]:
    v = resolve(ref)
    profile = ensure_profile(v)
    columns = column_window(v.schema, profile, col_offset)
    names = [c["name"] for c in columns["columns"]]
    preview = head(v, PREVIEW_ROWS, names).to_pylist() if names else []
    stats = profile.get("columns", {})
    images = {n for n in names if stats.get(n, {}).get("images")}
    rows = [
        [_thumb_url(v, n, i) if n in images and r[n] is not None else _cell(r[n]) for n in names]
        for i, r in enumerate(preview)
    ]
    return {
        "v": v,
        "columns": columns,
        "preview": {"names": names, "rows": rows},
        "quarantine": _quarantine(v.dataset, 0, QUARANTINE_SAMPLE),
        "recent": list_version_summaries(v.dataset, limit=2),
    }


@router.get("/ui/data")
async def datasets_page(request: Request, who: Viewer = Depends(viewer)) -> Response:
    """Every dataset, a page at a time (by name)."""
    at = Page.of(request, default_limit=50)
    rows = await asyncio.to_thread(list_datasets, offset=at.offset, limit=at.limit + 1)
    shown, prev, nxt = window(at, rows)
    return page(request, "data/datasets.html", datasets=shown, prev=prev, next=nxt)


@router.get("/ui/data/{name}")
async def dataset_page(request: Request, name: str, who: Viewer = Depends(viewer)) -> Response:
    """A dataset's versions, newest first, a page at a time."""
    at = Page.of(request, default_limit=50)
    rows = await asyncio.to_thread(
        list_version_summaries, name, offset=at.offset, limit=at.limit + 1
    )
    shown, prev, nxt = window(at, rows)
    return page(request, "data/dataset.html", name=name, versions=shown, prev=prev, next=nxt)


@router.get("/ui/data/{name}/versions/{version}")
async def version_page(
    request: Request, name: str, version: str, who: Viewer = Depends(viewer)
) -> Response:
    """A version: schema and profile of a window of columns, charts, preview, quarantine."""
    ref = parse_version(name, version)
    raw = request.query_params.get("col", "0")
    offset = int(raw) if raw.isdigit() and len(raw) < 10 else 0
    data = await asyncio.to_thread(_version, ref, offset)
    return page(request, "data/version.html", name=name, **data)


#: A thumbnail is ours (a PNG made from the cell, never its bytes): cacheable per session, and
#: not to be sniffed into anything else.
_THUMB_HEADERS = {
    **SECURITY_HEADERS,
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Cache-Control": "private, max-age=3600",
}


@router.get("/ui/data/{name}/versions/{version}/thumbnail")
async def thumbnail(
    name: str, version: str, column: str, row: int, who: Viewer = Depends(viewer)
) -> Response:
    """The PNG thumbnail of an image cell (at most 128 px a side); 4xx for anything else."""
    ref = parse_version(name, version)
    png = await asyncio.to_thread(cell_thumbnail, ref, column, row)
    return Response(png, media_type="image/png", headers=_THUMB_HEADERS)


@router.get("/ui/data/{name}/quarantine")
async def quarantine_page(request: Request, name: str, who: Viewer = Depends(viewer)) -> Response:
    """A dataset's quarantined rows with the rule and reason of each, newest first."""
    at = Page.of(request, default_limit=50)
    await asyncio.to_thread(list_version_summaries, name, limit=1)  # 404 for an unknown dataset
    data = await asyncio.to_thread(_quarantine, name, at.offset, at.limit + 1)
    data["rows"], prev, nxt = window(at, data["rows"])
    return page(request, "data/quarantine.html", name=name, prev=prev, next=nxt, **data)
