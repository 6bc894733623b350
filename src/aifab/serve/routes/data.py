"""``POST /v1/datasets/{name}/records``: devices push rows into a dataset (micro-batched).

The body is parsed and validated on a worker thread (a wide push costs tens of milliseconds of
validation, which must not stall the event loop), after a column cap that needs no validation.
Records land on a worker thread (a quick, bounded write); sealing a version runs on the app's
:class:`~aifab.data.BackgroundSealer`, never on a request thread. The answer waits a few seconds
for the seal, then says ``202`` with ``sealing: true`` if it is still running.

A push sent with an ``Idempotency-Key`` header (:mod:`aifab.serve.idempotency`) lands once: a
retry with the same key and body gets the first answer again, with ``Idempotent-Replayed:
true``. Its answer is stored in the thread that lands the rows, so a dropped connection cannot
separate the two; and once its rows landed it is never answered 503 (a retry would replay that).
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
from aifab.serve import idempotency
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
    },
    "parameters": [
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "description": "A retry with the same key and body gets the first answer (24 h).",
            "schema": {"type": "string", "minLength": 1, "maxLength": 255},
        }
    ],
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


def _idempotency_key(request: Request) -> str | None:
    """The request's ``Idempotency-Key``, checked: 1 to 255 printable ASCII characters."""
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if not 0 < len(key) <= idempotency.MAX_KEY_CHARS or not all(" " <= c <= "~" for c in key):
        raise ApiError(
            400,
            f"Idempotency-Key must be 1 to {idempotency.MAX_KEY_CHARS} printable ASCII characters",
            param="Idempotency-Key",
        )
    return key


def _replay(prior: idempotency.Prior) -> JSONResponse:
    """The answer to a retry: the first request's, or why there is none to give."""
    if not prior.same_request:
        raise ApiError(
            422,
            "this Idempotency-Key was used with another request: use a new key for a new push",
            param="Idempotency-Key",
            code="idempotency_key_reused",
        )
    if prior.status is None:
        raise ApiError(
            409,
            "a request with this Idempotency-Key is still running: retry in a moment",
            code="idempotency_key_in_use",
            headers={"Retry-After": "1"},
        )
    return JSONResponse(prior.body, prior.status, headers={"Idempotent-Replayed": "true"})


def _land(name: str, records: list[dict[str, Any]], held: tuple[str, str] | None) -> Any:
    """Land the rows and, for an idempotent push, store that answer at once (same thread)."""
    from aifab.data.append import append_records as append

    landed = append(name, records, seal=False)
    if held is not None:
        idempotency.finish(*held, 200, landed.to_dict())
    return landed


async def _answer(held: tuple[str, str] | None, status: int, body: dict[str, Any]) -> JSONResponse:
    if held is not None:
        await asyncio.to_thread(idempotency.finish, *held, status, body)
    return JSONResponse(body, status)


@router.post("/v1/datasets/{name}/records", openapi_extra=_OPENAPI)
async def append_records(
    name: str, request: Request, principal: Principal = Depends(require("ingest"))
) -> JSONResponse:
    """Append records: counts of accepted/quarantined/pending rows and any sealed version."""
    from aifab.data.append import DEFAULT_BATCH_ROWS

    if principal.key is not None and not may_push(principal.key, name):
        grants = ", ".join(principal.key.datasets) or "none"
        raise ApiError(
            403,
            f"key {principal.key_id} may not push to dataset {name!r} (its grants: {grants}; "
            "'aifab keys create --role client --datasets NAME|PREFIX*')",
            code="permission_denied",
        )
    key = _idempotency_key(request)
    raw = await request.body()
    held = None
    if key is not None:
        print_ = idempotency.fingerprint(f"POST {request.url.path}", raw)
        prior = await asyncio.to_thread(idempotency.reserve, principal.key_id, key, print_)
        if prior is not None:
            return _replay(prior)
        held = (principal.key_id, key)
    try:
        body = await asyncio.to_thread(_parse, raw)
        landed = await principal.call(_land, name, body.records, held)
    except Exception:
        # Refused or failed before anything landed: a retry with this key must run.
        if held is not None:
            await asyncio.to_thread(idempotency.abandon, *held)
        raise
    out = landed.to_dict()
    if not (landed.pending_rows and (body.flush or landed.pending_rows >= DEFAULT_BATCH_ROWS)):
        return JSONResponse(out)
    try:
        future = _sealer(request).submit(name, actor=principal.actor)
    except ConflictError as exc:
        if held is not None:  # the rows landed: report the seal, do not invite a duplicate
            return await _answer(held, 200, {**out, "seal_error": exc.message})
        raise ApiError(503, exc.message, headers={"Retry-After": "5"}) from None
    try:
        # Shielded: a timeout must not cancel a queued seal other pushes share.
        version = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), SEAL_WAIT_S)
    except TimeoutError:
        return await _answer(held, 202, {**out, "sealing": True})
    except AifabError as exc:
        # The rows are landed and stay pending; the seal failed (and is retried a few times).
        return await _answer(held, 200, {**out, "seal_error": first_line(exc)})
    return await _answer(held, 200, {**out, "version": version.ref if version else None})
