"""Built-in tools over the platform: read-only SQL on the lake and predictions of a deployment.

Each factory takes the tool's options from the agent's YAML and the run's
:class:`~aifab.agents.tools.ToolContext`, and returns a :class:`~aifab.agents.tools.Tool`.
"""

from __future__ import annotations

import threading
from typing import Any

from aifab.agents.tools import Tool, ToolContext, ToolError, tool_from_function
from aifab.core.errors import AifabError, InvalidInputError

__all__ = ["MAX_RUNNING_QUERIES", "check_select", "kb_search_tool", "predict_tool", "sql_tool"]


def check_select(sql: str) -> None:
    """Refuse anything but one SELECT statement (``WITH ... SELECT`` included).

    Raises:
        ToolError: several statements, or a statement that is not a SELECT (COPY, ATTACH,
            PRAGMA, SET, DDL, DML...), or SQL that does not parse.
    """
    import duckdb

    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise ToolError(f"SQL does not parse: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1:
        raise ToolError(f"one SELECT statement expected, got {len(statements)} statements")
    if statements[0].type != duckdb.StatementType.SELECT:
        kind = str(statements[0].type).rsplit(".", 1)[-1]
        raise ToolError(f"only SELECT is allowed, not {kind}")


#: SQL tool queries running at once in this process, across runs. A query the agent loop gave
#: up on (its own tool timeout) still holds its slot until its own time limit stops it, so the
#: work left behind by abandoned calls is bounded too.
MAX_RUNNING_QUERIES = 4
_RUNNING = threading.BoundedSemaphore(MAX_RUNNING_QUERIES)


def sql_tool(options: dict[str, Any], ctx: ToolContext) -> Tool:
    """``sql``: one read-only SELECT over the lake, at most ``max_rows`` rows, ``timeout_s``."""
    max_rows = int(options.get("max_rows", 50))
    timeout_s = float(options.get("timeout_s", 10.0))
    if not 1 <= max_rows <= 10_000 or not 0 < timeout_s <= 300:
        raise InvalidInputError("sql tool: max_rows must be 1-10000 and timeout_s 0-300")

    def sql(query: str) -> dict[str, Any]:
        """Run one read-only SQL SELECT (DuckDB dialect) over the lake's datasets.

        Args:
            query: a single SELECT statement; each dataset is a table of its name
                (``SELECT plan, count(*) FROM customers GROUP BY plan``).
        """
        from aifab.data import query as run_query

        check_select(query)
        if not _RUNNING.acquire(timeout=1.0):
            raise ToolError(f"{MAX_RUNNING_QUERIES} SQL queries are running; try again later")
        try:
            # Stopped by DuckDB's interrupt at the limit: nothing keeps running afterwards.
            table = run_query(query, limit=max_rows + 1, timeout_s=timeout_s)
        except AifabError as exc:
            raise ToolError(exc.message) from None
        finally:
            _RUNNING.release()
        rows = table.to_pylist()
        return {
            "columns": table.column_names,
            "rows": rows[:max_rows],
            "truncated": len(rows) > max_rows,
        }

    return tool_from_function(sql, name=options.get("name", "sql"))


def predict_tool(options: dict[str, Any], ctx: ToolContext) -> Tool:
    """``predict``: call one deployment through the gateway, with the caller's key."""
    import httpx

    deployment = options.get("deployment")
    if not deployment or not isinstance(deployment, str):
        raise InvalidInputError("predict tool: option 'deployment' (a deployment name) is required")
    timeout_s = float(options.get("timeout_s", 10.0))
    max_records = int(options.get("max_records", 100))

    def predict(records: list[dict[str, Any]]) -> dict[str, Any]:
        """Predict with the deployed model: one prediction per record.

        Args:
            records: input rows as objects of feature name to value.
        """
        if len(records) > max_records:
            raise ToolError(f"at most {max_records} records per call, got {len(records)}")
        if ctx.gateway_url is None:
            return _predict_here(deployment, records)
        headers = {"Authorization": f"Bearer {ctx.api_key}"} if ctx.api_key else {}
        url = f"{ctx.gateway_url.rstrip('/')}/v1/predict/{deployment}"
        try:
            resp = httpx.post(url, json={"records": records}, headers=headers, timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise ToolError(f"deployment {deployment} unreachable: {exc}") from None
        body = _json_or_text(resp)
        if resp.status_code != 200:
            message = body.get("error", {}).get("message") if isinstance(body, dict) else body
            raise ToolError(f"deployment {deployment} answered {resp.status_code}: {message}")
        return {"model": body.get("model"), "predictions": body.get("predictions")}

    description = options.get("description")
    tool = tool_from_function(predict, name=options.get("name", "predict"))
    if description:
        tool = Tool(tool.name, str(description), tool.parameters, tool.fn)
    return tool


def kb_search_tool(options: dict[str, Any], ctx: ToolContext) -> Tool:
    """``kb_search``: search one knowledge base; the passages come back as data."""
    kb = options.get("kb")
    if not kb or not isinstance(kb, str):
        raise InvalidInputError("kb_search tool: option 'kb' (a knowledge base name) is required")
    k = int(options.get("k", 5))
    mode = str(options.get("mode", "hybrid"))
    chars = int(options.get("max_chars", 800))

    def kb_search(query: str) -> dict[str, Any]:
        """Search the knowledge base by meaning and keywords; returns the best passages.

        Args:
            query: what to look for, in words.
        """
        from aifab.rag import search

        try:
            found = search(kb, query, k=k, mode=mode)
        except AifabError as exc:
            raise ToolError(exc.message) from None
        return {
            "kb": f"{found['kb']}@{found['version']}",
            "results": [
                {
                    "document": r.get("document"),
                    "heading": r.get("heading"),
                    "text": str(r.get("text", ""))[:chars],
                    "score": r.get("score"),
                }
                for r in found["results"]
            ],
        }

    return tool_from_function(kb_search, name=options.get("name", "kb_search"))


def _predict_here(deployment: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The deployment's model run in this process (no gateway: a CLI run or a pipeline step)."""
    from aifab.inference.deployments import get_deployment
    from aifab.inference.loading import shared_model

    try:
        loaded = shared_model(get_deployment(deployment)["model"])
    except AifabError as exc:
        raise ToolError(f"deployment {deployment}: {exc.message}") from None
    try:
        outputs = loaded.handler.predict(loaded.handler.decode({"records": records}))
    except AifabError as exc:
        raise ToolError(f"deployment {deployment}: {exc.message}") from None
    return {"model": loaded.ref, "predictions": [loaded.handler.encode(o) for o in outputs]}


def _json_or_text(resp: Any) -> Any:
    try:
        return resp.json()
    except ValueError:
        return resp.text[:500]
