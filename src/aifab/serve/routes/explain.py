"""``POST /v1/explain/{deployment}``: why the deployed classifier predicts what it does.

The body is a predict body (``{"records": [...]}``) plus optional ``top`` and ``method``; the
answer names, per record, the raw features that moved its predicted class's probability.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Request

from aifab.ops.explain.explainers import explain_records
from aifab.serve.auth import Principal, require
from aifab.serve.errors import ApiError

router = APIRouter(tags=["explain"])

MAX_BODY_BYTES = 1024 * 1024
_KEYS = {"records", "top", "method"}


def _parse(body: bytes) -> dict[str, Any]:
    if len(body) > MAX_BODY_BYTES:
        raise ApiError(413, f"body of {len(body)} bytes is over {MAX_BODY_BYTES}")
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ApiError(400, f"malformed JSON: {exc}") from None
    if not isinstance(payload, dict) or "records" not in payload:
        raise ApiError(422, "body: expected an object with 'records'", param="body")
    extra = set(payload) - _KEYS
    if extra:
        raise ApiError(422, f"body: unknown keys {sorted(extra)}", param="body")
    top = payload.get("top")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int)):
        raise ApiError(422, "top: expected an integer", param="top")
    if not isinstance(payload.get("method", "shapley"), str):
        raise ApiError(422, "method: expected a string", param="method")
    return payload


@router.post("/v1/explain/{deployment}")
async def explain(
    deployment: str, request: Request, principal: Principal = Depends(require("invoke"))
) -> dict[str, Any]:
    """Shapley contributions of raw features to each record's predicted class."""
    served = request.app.state.manager.get(deployment)
    if served.kind != "classifier":
        raise ApiError(
            422,
            f"deployment {deployment!r} is a {served.kind}: explanations are for classifiers",
            param="deployment",
        )
    payload = _parse(await request.body())
    result = await principal.call(
        explain_records,
        served.primary.model,
        payload["records"],
        method=payload.get("method", "shapley"),
        top=payload.get("top"),
    )
    return {"deployment": served.name, **result}
