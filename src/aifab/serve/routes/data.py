"""``POST /v1/datasets/{name}/records``: devices push rows into a dataset (micro-batched).

The body is parsed and validated on a worker thread (a wide push costs tens of milliseconds of
validation, which must not stall the event loop), after a column cap that needs no validation.
Records land on a worker thread (a quick, bounded write); sealing a version runs on the app's
:class:`~aifab.data.BackgroundSealer`, never on a request thread. The answer waits a few seconds
for the seal, then says ``202`` with ``sealing: true`` if it is still running.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aifab.core.errors import AifabError, ConflictError, first_line
from aifab.serve.auth import Principal, require
from aifab.serve.errors import ApiError
from aifab.serve.keys import may_push

router = APIRouter(tags=["data"])

#: Seconds an answer waits for its seal before answering 202 (the seal goes on).
SEAL_WAIT_S = 10.0
#: Commits running at once in one server.
MAX_CONCURRENT_SEALS = 2


class RecordsIn(BaseModel):
    """Rows to append; rows that do not fit the dataset's schema go to its quarantine."""

    model_config = ConfigDict(extra="forbid")

    records: list[dict[str, str | int | float | bool | None]] = Field(
        ..., min_length=1, max_length=100_000, description="Flat objects: column -> value."
    )
    flush: bool = Field(False, description="Seal a new dataset version now.")


_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": RecordsIn.model_json_schema()}},
    }
}


def _parse(body: bytes) -> RecordsIn:
    """The request body as :class:`RecordsIn`, its width checked before validation."""
    from aifab.core.settings import get_settings

    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"malformed JSON: {exc}") from None
    except RecursionError:
        raise ApiError(400, "malformed JSON: nested too deeply") from None
    records = payload.get("records") if isinstance(payload, dict) else None
    cap = get_settings().max_columns
    for i, record in enumerate(records if isinstance(records, list) else []):
        if isinstance(record, dict) and len(record) > cap:
            raise ApiError(
                422,
                f"records[{i}]: {len(record)} columns is over the limit of {cap} columns "
                "(setting AIFAB_MAX_COLUMNS)",
                param=f"records[{i}]",
            )
    try:
        return RecordsIn.model_validate(payload)
    except ValidationError as exc:
        raise RequestValidationError(exc.errors()) from None


def _sealer(request: Request) -> Any:
    from aifab.data import BackgroundSealer

    sealer = getattr(request.app.state, "sealer", None)
    if sealer is None:
        sealer = request.app.state.sealer = BackgroundSealer(max_concurrent=MAX_CONCURRENT_SEALS)
    return sealer


@router.post("/v1/datasets/{name}/records", openapi_extra=_OPENAPI)
async def append_records(
    name: str, request: Request, principal: Principal = Depends(require("ingest"))
) -> JSONResponse:
    """Append records: counts of accepted/quarantined/pending rows and any sealed version."""
    from aifab.data.append import DEFAULT_BATCH_ROWS
    from aifab.data.append import append_records as append

    if principal.key is not None and not may_push(principal.key, name):
        grants = ", ".join(principal.key.datasets) or "none"
        raise ApiError(
            403,
            f"key {principal.key_id} may not push to dataset {name!r} (its grants: {grants}; "
            "'aifab keys create --role client --datasets NAME|PREFIX*')",
            code="permission_denied",
        )
    body = await asyncio.to_thread(_parse, await request.body())
    landed = await principal.call(append, name, body.records, seal=False)
    out = landed.to_dict()
    if not (landed.pending_rows and (body.flush or landed.pending_rows >= DEFAULT_BATCH_ROWS)):
        return JSONResponse(out)
    try:
        future = _sealer(request).submit(name, actor=principal.actor)
    except ConflictError as exc:
        raise ApiError(503, exc.message, headers={"Retry-After": "5"}) from None
    try:
        # Shielded: a timeout must not cancel a queued seal other pushes share.
        version = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), SEAL_WAIT_S)
    except TimeoutError:
        return JSONResponse({**out, "sealing": True}, status_code=202)
    except AifabError as exc:
        # The rows are landed and stay pending; the seal failed (and is retried a few times).
        return JSONResponse({**out, "seal_error": first_line(exc)})
    return JSONResponse({**out, "version": version.ref if version else None})
