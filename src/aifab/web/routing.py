"""``UiRoute``: page routes that answer refusals and errors as HTML pages, not JSON.

The gateway's error handlers answer in OpenAI's JSON shape, right for API clients and wrong
for a person in a browser. Page routers use this route class, which turns a missing session
into a redirect to the sign-in page and errors into an error page with the same message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.responses import RedirectResponse
from fastapi.routing import APIRoute

from aifab.core.errors import AifabError, InvalidInputError, NotFoundError
from aifab.web.auth import LoginRequired, UiError
from aifab.web.render import page

__all__ = ["UiRoute", "error_page"]

log = logging.getLogger("aifab.web")


def error_page(request: Request, status: int, message: str) -> Response:
    """An HTML error page (the message is escaped like every other value)."""
    return page(request, "error.html", status=status, status_code=status, message=message)


def _login_redirect(request: Request) -> Response:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    location = f"/ui/login?next={quote(target, safe='')}"
    if request.headers.get("hx-request"):
        return Response(status_code=204, headers={"HX-Redirect": location})
    return RedirectResponse(location, status_code=303)


class UiRoute(APIRoute):
    """An :class:`APIRoute` whose handler renders refusals and service errors as pages."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's handler, wrapped to answer refusals and service errors as pages."""
        handler = super().get_route_handler()

        async def run(request: Request) -> Response:
            try:
                return await handler(request)
            except LoginRequired:
                return _login_redirect(request)
            except UiError as exc:
                return error_page(request, exc.status, exc.message)
            except NotFoundError as exc:
                return error_page(request, 404, str(exc))
            except InvalidInputError as exc:
                return error_page(request, 400, str(exc))
            except AifabError as exc:
                return error_page(request, 409, str(exc))

        return run
