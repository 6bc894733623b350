"""``POST /v1/datasets/{name}/records``: devices push rows into a dataset (micro-batched)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from aifab.serve.auth import Principal, require
from aifab.serve.errors import ApiError
from aifab.serve.keys import may_push

router = APIRouter(tags=["data"])


class RecordsIn(BaseModel):
    """Rows to append; rows that do not fit the dataset's schema go to its quarantine."""

    model_config = ConfigDict(extra="forbid")

    records: list[dict[str, str | int | float | bool | None]] = Field(
        ..., min_length=1, max_length=100_000, description="Flat objects: column -> value."
    )
    flush: bool = Field(False, description="Seal a new dataset version now.")


@router.post("/v1/datasets/{name}/records")
async def append_records(
    name: str, body: RecordsIn, principal: Principal = Depends(require("ingest"))
) -> dict[str, Any]:
    """Append records: counts of accepted/quarantined/pending rows and any sealed version."""
    from aifab.data.append import append_records as append

    if principal.key is not None and not may_push(principal.key, name):
        grants = ", ".join(principal.key.datasets) or "none"
        raise ApiError(
            403,
            f"key {principal.key_id} may not push to dataset {name!r} (its grants: {grants}; "
            "'aifab keys create --role client --datasets NAME|PREFIX*')",
            code="permission_denied",
        )
    return await principal.call(lambda: append(name, body.records, flush=body.flush).to_dict())
