"""``/ui/data/NAME/label``: the labeling queue, least confident rows first, labeled by keyboard.

The page shows one row and its label choices (number keys pick them, see ``static/app.js``);
the POST stores the label as the signed-in key (``submit_label``) and shows the next row.
Labeling needs the ``ingest`` permission: it writes data, as pushing records does.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import RedirectResponse

from aifab.core.actor import acting_as
from aifab.data import (
    VersionInfo,
    ensure_profile,
    label_history,
    label_queue_next,
    resolve,
    submit_label,
)
from aifab.web.auth import UiError, Viewer, need, read_form, viewer
from aifab.web.render import page
from aifab.web.routing import UiRoute

__all__ = ["LABEL_PERMISSION", "label_choices", "router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)

#: The permission labeling needs (the API's key roles): the same as writing records.
LABEL_PERMISSION = "ingest"
#: Label choices offered at most (number keys reach the first nine).
MAX_CHOICES = 9


def label_choices(v: VersionInfo) -> list[str]:
    """The labels a person picks from for version ``v``.

    Those of the labeling functions that made it, else the most common values of its
    ``label`` column.
    """
    functions = (v.transform.get("spec") or {}).get("functions") or []
    found = [str(f["label"]) for f in functions if isinstance(f, dict) and f.get("label")]
    if not found and "label" in v.columns:
        top = ensure_profile(v).get("columns", {}).get("label", {}).get("top_values") or []
        found = [str(value) for value, _ in top]
    return list(dict.fromkeys(found))[:MAX_CHOICES]


def _queue(name: str) -> dict[str, Any]:
    items = label_queue_next(name, 1)
    return {
        "item": items[0] if items else None,
        "choices": label_choices(resolve(name)),
        "history": label_history(name, 10),
    }


def _label_url(name: str) -> str:
    return f"/ui/data/{quote(name, safe='')}/label"


@router.get("/ui/data/{name}/label")
async def label_page(request: Request, name: str, who: Viewer = Depends(viewer)) -> Response:
    """The next row to label, its choices, and the latest labels given."""
    data = await asyncio.to_thread(_queue, name)
    return page(
        request,
        "data/label.html",
        name=name,
        can_label=who.can(LABEL_PERMISSION),
        action=_label_url(name),
        **data,
    )


@router.post("/ui/data/{name}/label")
async def label_submit(request: Request, name: str, who: Viewer = Depends(viewer)) -> Response:
    """Store a label for one row (as the signed-in key), then show the next row."""
    fields = await read_form(request, who)
    need(who, LABEL_PERMISSION)
    item, label = fields.get("item_key", ""), fields.get("label", "")
    if not item or not label.strip():
        raise UiError(400, "pick a label for the row (item_key and label are required)")

    def run() -> None:
        with acting_as(who.actor):
            submit_label(name, item, label)

    await asyncio.to_thread(run)
    return RedirectResponse(_label_url(name), status_code=303)
