"""``/ui/data``: datasets, versions, profiles, quarantine, diffs, lineage and labeling.

Each page lives in a submodule; this router includes them all.
"""

from __future__ import annotations

from fastapi import APIRouter

from aifab.web.pages.data import browse, compare, labeling, lineage

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
for _module in (browse, compare, lineage, labeling):
    router.include_router(_module.router)
