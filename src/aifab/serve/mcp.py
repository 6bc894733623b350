"""The platform's tools over the Model Context Protocol, under the caller's key and role.

``aifab mcp`` serves them on stdio (how desktop agent clients start tool servers): the key comes
from the environment and is checked like the gateway checks it; a caller gets only the tools its
role allows (see :func:`aifab.agents.platform_tools.platform_tools`). The key is read again on
every request of the session (listing tools included), so revoking it ends the session. It lives
in ``serve`` because keys and roles belong to the gateway; the tools themselves are the agents
package's.
"""

from __future__ import annotations

import functools
from typing import Any

from aifab.agents import Tool, ToolContext, ToolError
from aifab.agents.platform_tools import platform_tools
from aifab.agents.tools import may_use
from aifab.core.actor import acting_as
from aifab.core.errors import AifabError, InvalidInputError
from aifab.serve.keys import PERMISSIONS, authenticate, key_info

__all__ = ["build_mcp_server", "serve_stdio"]


def _traced(tool: Tool, key_id: str) -> Any:
    """The tool's function, run as the caller (audit events name the key).

    The key is read again on every call: a session outlives its key's revocation otherwise.
    """
    from mcp.server.mcpserver.exceptions import ToolError as McpToolError

    @functools.wraps(tool.fn)
    def call(**kwargs: Any) -> Any:
        key = key_info(key_id)
        if key is None:
            raise McpToolError("the API key of this session was revoked")
        if not may_use(tool.name, PERMISSIONS.get(key.role, frozenset())):
            raise McpToolError(f"the key's role ({key.role}) may not use {tool.name}")
        with acting_as(f"key:{key_id}"):
            try:
                return tool.fn(**kwargs)
            except (ToolError, AifabError) as exc:
                # An expected refusal: the client gets the reason as an is_error result.
                raise McpToolError(str(exc)) from None

    return call


def _key_still_valid(key_id: str) -> Any:
    """Middleware refusing every request once the session's key is revoked.

    ``tools/call`` is let through: :func:`_traced` refuses it as a tool error result, which
    clients show to the model. Everything else (``tools/list``, ``ping``...) gets an MCP error.
    """
    import anyio
    from mcp import MCPError
    from mcp_types import INVALID_REQUEST

    async def middleware(ctx: Any, call_next: Any) -> Any:
        checked = ctx.request_id is not None and ctx.method != "tools/call"
        if checked and await anyio.to_thread.run_sync(key_info, key_id) is None:
            raise MCPError(INVALID_REQUEST, "the API key of this session was revoked")
        return await call_next(ctx)

    return middleware


def build_mcp_server(secret: str | None, gateway_url: str | None = None) -> Any:
    """An MCP server offering the tools the key ``secret`` may use.

    Args:
        secret: the caller's aifab API key.
        gateway_url: the aifab server that tools calling models go through.

    Raises:
        InvalidInputError: no key, or an unknown or revoked one.
    """
    from mcp.server.mcpserver import MCPServer

    if not secret:
        raise InvalidInputError(
            "aifab mcp needs an API key: set $AIFAB_API_KEY (aifab keys create)"
        )
    key = authenticate(secret)
    if key is None:
        raise InvalidInputError("aifab mcp: the API key is invalid or revoked")
    ctx = ToolContext(gateway_url=gateway_url, api_key=secret)
    server = MCPServer(
        "aifab",
        instructions="aifab's lake and models: list datasets, query them read-only, predict.",
        middleware=[_key_still_valid(key.id)],
    )
    for tool in platform_tools(ctx, PERMISSIONS.get(key.role, frozenset())):
        server.add_tool(_traced(tool, key.id), name=tool.name, description=tool.description)
    return server


def serve_stdio(secret: str | None, gateway_url: str | None = None) -> None:
    """Serve the caller's tools over stdin/stdout until the client hangs up.

    The ``sql`` tool's queries run in the worker pool (memory-capped, killed at their limit).
    """
    from aifab.core import workers
    from aifab.serve.app import WORKER_PRELOAD

    workers.start(preload=WORKER_PRELOAD)
    try:
        build_mcp_server(secret, gateway_url).run("stdio")
    finally:
        workers.stop()
