"""``POST /v1/predict/{deployment}``: rows or records in, predictions out.

The body is parsed by hand (not by a pydantic model): the handler's ``decode`` is the one
validator of rows, and skipping a model layer keeps the hot path short.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from aifab.core.errors import InvalidInputError
from aifab.core.ids import new_id
from aifab.inference.classifier_inputs import ImageData
from aifab.serve.auth import Principal, require
from aifab.serve.errors import ApiError, as_api_error
from aifab.serve.invoke import invoke, record, reserve

router = APIRouter(tags=["predict"])

#: Bodies larger than this are refused before parsing (a batch limit applies after decoding).
MAX_BODY_BYTES = 16 * 1024 * 1024

_VALUE: dict[str, Any] = {"type": ["string", "number", "integer", "boolean", "null"]}
_BODY_SCHEMA: dict[str, Any] = {
    "description": "Rows as objects (``records``) or as arrays in input column order (``rows``).",
    "oneOf": [
        {
            "type": "object",
            "properties": {
                "records": {
                    "type": "array",
                    "items": {"type": "object", "additionalProperties": _VALUE},
                }
            },
            "required": ["records"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "properties": {"rows": {"type": "array", "items": {"type": "array", "items": _VALUE}}},
            "required": ["rows"],
            "additionalProperties": False,
        },
    ],
}
_OPENAPI: dict[str, Any] = {
    "requestBody": {"required": True, "content": {"application/json": {"schema": _BODY_SCHEMA}}},
    "responses": {
        "200": {
            "description": "One prediction per row, in order.",
            "content": {
                "application/json": {
                    "example": {
                        "deployment": "churn",
                        "model": "churn@3",
                        "predictions": [{"label": "yes", "probabilities": {"no": 0.2, "yes": 0.8}}],
                        "request_id": "req_0192f1c3a4b5_9f8e7d6c",
                    }
                }
            },
        },
        "400": {"description": "Malformed JSON."},
        "401": {"description": "No or unknown API key."},
        "403": {"description": "The key's role may not invoke models."},
        "404": {"description": "Unknown deployment."},
        "413": {"description": "Body too large."},
        "422": {"description": "Bad rows; the message names the field and row."},
        "429": {"description": "Rate limit; see Retry-After."},
        "503": {"description": "The deployment is not loaded (yet)."},
    },
}


#: The route template a prediction is counted and logged under, whoever asks for it.
ROUTE = "/v1/predict/{deployment}"


@router.post(ROUTE, openapi_extra=_OPENAPI, response_class=JSONResponse)
async def predict(
    deployment: str, request: Request, principal: Principal = Depends(require("invoke"))
) -> Response:
    """Predict with a deployed classifier: ``{"records": [...]}`` or ``{"rows": [[...]]}``."""
    started = time.perf_counter()
    answer = await predict_body(request, deployment, await request.body(), started=started)
    return JSONResponse(answer, headers={"x-request-id": answer["request_id"]})


async def predict_body(
    request: Request, deployment: str, body: bytes, *, started: float | None = None
) -> dict[str, Any]:
    """Run one predict body through ``deployment``, as the request's principal.

    The request log, metrics and quotas see it as a ``POST /v1/predict/...`` of the key on
    ``request.state.principal`` (the dashboard's try-it form calls it with the viewer's key).

    Raises:
        ApiError: 404/503 for the deployment, 413/400/422 for the body, 500 if the model fails.
    """
    started = time.perf_counter() if started is None else started
    served = request.app.state.manager.get(deployment)
    target = served.pick(request.headers)
    try:
        if len(body) > MAX_BODY_BYTES:
            raise ApiError(413, f"body of {len(body)} bytes is over {MAX_BODY_BYTES}")
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ApiError(400, f"malformed JSON: {exc}") from None
        except RecursionError:
            raise ApiError(400, "malformed JSON: nested too deeply") from None
        if not isinstance(payload, dict):
            raise ApiError(422, "body: expected an object with 'records' or 'rows'", param="body")
        try:
            if "image" in getattr(target.handler, "input_modalities", ()):
                # Off the event loop: each image waits here on the worker pool.
                items = await request.state.principal.call(target.handler.decode, payload)
            else:
                # No images: cheap, and kept off the thread pool that image waits can fill.
                items = target.handler.decode(payload)
        except InvalidInputError as exc:
            raise as_api_error(exc) from None
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            # A shape the handler did not foresee is still the caller's input, not our fault.
            raise ApiError(422, f"body: cannot decode the input ({exc})", param="body") from None
    except ApiError as exc:
        record(
            request,
            served.name,
            status=exc.status,
            started=started,
            model=target.model,
            route=ROUTE,
        )
        raise
    request_id = new_id("req")
    image_tokens = _image_tokens(items)
    if image_tokens:
        try:
            await asyncio.to_thread(reserve, request, image_tokens)
        except ApiError as exc:
            record(request, served.name, status=exc.status, started=started, route=ROUTE)
            raise
    outputs = await invoke(
        request,
        served,
        target,
        items,
        started=started,
        route=ROUTE,
        request_id=request_id,
        input_tokens=image_tokens,
    )
    encode = target.handler.encode
    return {
        "deployment": served.name,
        "model": target.model,
        "predictions": [encode(o) for o in outputs],
        "request_id": request_id,
    }


def _image_tokens(items: list[Any]) -> int:
    """What the request's images cost against the key's token quota (priced by pixels)."""
    return sum(
        v.tokens
        for item in items
        if isinstance(item, dict)
        for v in item.values()
        if isinstance(v, ImageData)
    )
