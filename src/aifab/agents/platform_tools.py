"""The platform's own tools offered to outside agent clients (over MCP), chosen by permission.

A caller whose key may ``read`` gets the lake (list datasets, read-only SQL); one that may
``invoke`` gets predictions of any deployment (through the gateway, with the caller's key, so
roles, limits and quotas apply there too).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from aifab.agents.builtin_tools import predict_tool, sql_tool
from aifab.agents.tools import Tool, ToolContext, ToolError, may_use, tool_from_function

__all__ = ["platform_tools"]


def _list_datasets_tool() -> Tool:
    def list_datasets() -> list[dict[str, Any]]:
        """List the lake's datasets: name, newest version, rows, columns, description."""
        from aifab.data import list_datasets as datasets

        keys = ("name", "latest", "rows", "columns", "description")
        return [{k: d[k] for k in keys} for d in datasets()]

    return tool_from_function(list_datasets)


def _predict_any_tool(ctx: ToolContext) -> Tool:
    def predict(deployment: str, records: list[dict[str, Any]]) -> dict[str, Any]:
        """Predict with a deployed model: one prediction per record.

        Args:
            deployment: the deployment's name.
            records: input rows as objects of feature name to value.
        """
        if not deployment.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise ToolError(f"deployment name {deployment[:100]!r} is not valid")
        return predict_tool({"deployment": deployment}, ctx).fn(records=records)

    return tool_from_function(predict)


def platform_tools(ctx: ToolContext, permissions: Collection[str]) -> list[Tool]:
    """The tools a caller with ``permissions`` may use (the rule of agent runs: ``may_use``)."""
    allowed = frozenset(permissions)
    candidates: list[tuple[str, Callable[[], Tool]]] = [
        ("list_datasets", _list_datasets_tool),
        ("sql", lambda: sql_tool({}, ctx)),
        ("predict", lambda: _predict_any_tool(ctx)),
    ]
    return [build() for kind, build in candidates if may_use(kind, allowed)]
