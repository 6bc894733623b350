"""``POST /v1/datasets/{name}/records``: devices push rows into a dataset (micro-batched)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from aifab.serve.auth import Principal, require

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

    return await principal.call(lambda: append(name, body.records, flush=body.flush).to_dict())
