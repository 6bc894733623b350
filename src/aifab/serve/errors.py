"""One JSON error shape for every route (OpenAI's, so its SDKs read our errors too).

``{"error": {"message": ..., "type": ..., "param": ..., "code": ...}}``. Bad input is a 4xx
naming the field; an unexpected failure is a 500 that names no internals. On the OpenAI routes
bad input is a 400 ``invalid_request_error``, as OpenAI answers it (its SDKs raise
``BadRequestError``); aifab's own routes keep 422.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from aifab.core.errors import AifabError, InvalidInputError

log = logging.getLogger("aifab.serve")

__all__ = ["ApiError", "as_api_error", "error_body", "install_error_handlers"]

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "unavailable_error",
}


#: Routes that answer invalid input as OpenAI does: 400, not 422.
OPENAI_ROUTES = frozenset(
    {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"}
)


def _openai_status(request: Request, status: int) -> int:
    """``status`` as answered on ``request``'s route: a 422 is OpenAI's 400 on its routes."""
    return 400 if status == 422 and request.url.path.rstrip("/") in OPENAI_ROUTES else status


class ApiError(Exception):
    """An HTTP error with a message for the caller (raised anywhere in a request)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = dict(headers or {})


_NAMED_FIELD = re.compile(r"(?:field|column|parameter)\s+'([^']+)'")


def _param(message: str) -> str | None:
    """The field a handler message names: ``field 'age' ...`` or ``age: ...``."""
    m = _NAMED_FIELD.search(message)
    if m:
        return m.group(1)
    head = message.split(":", 1)[0].strip()
    return head if head and " " not in head and len(message) > len(head) else None


def _status(exc: AifabError) -> int:
    """An aifab error's HTTP status; every server-side failure is a plain 500."""
    return exc.http_status if exc.http_status < 500 else 500


def as_api_error(exc: ApiError | AifabError) -> ApiError:
    """``exc`` as the :class:`ApiError` to answer: bad input is a 422 naming its field.

    A server-side failure becomes a 500 whose message names no internals.
    """
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, InvalidInputError):
        return ApiError(422, exc.message, param=_param(exc.message))
    status = _status(exc)
    return ApiError(status, exc.message if status < 500 else "internal error")


def error_body(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The JSON body of an error response."""
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _response(
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = error_body(status, message, param=param, code=code)
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def _field(loc: tuple[Any, ...]) -> str:
    """``("body", "messages", 0, "role")`` -> ``messages[0].role``."""
    out = ""
    for part in loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "body"


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    status = _openai_status(request, exc.status)
    return _response(status, exc.message, param=exc.param, code=exc.code, headers=exc.headers)


async def _aifab_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AifabError)
    error = as_api_error(exc)
    status = _openai_status(request, error.status)
    return _response(status, str(exc) if status < 500 else "internal error", param=error.param)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    if first.get("type") == "json_invalid":
        return _response(400, f"malformed JSON: {first.get('msg', '')}".rstrip(": "))
    field = _field(tuple(first.get("loc", ())))
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    status = _openai_status(request, 422)
    message = f"{field}: {first.get('msg', 'invalid')}{more}"
    if field == "body" and not _sent_json(request):
        # curl -d without -H sends form encoding: FastAPI then sees no JSON object at all.
        message += "; send the body as JSON with the header 'Content-Type: application/json'"
    return _response(status, message, param=field)


def _sent_json(request: Request) -> bool:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


async def _http_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = getattr(exc, "code", None)  # the request guard's refusals carry one
    return _response(exc.status_code, str(exc.detail), code=code, headers=exc.headers)


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error", exc_info=exc)
    return _response(500, "internal error")


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` with :func:`error_body` JSON."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(AifabError, _aifab_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
