"""``aifab mcp``: the official MCP client lists and calls aifab's tools over stdio, per role."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError, StdioServerParameters

from aifab.data import ingest
from aifab.serve.keys import create_key, revoke_key

pytestmark = pytest.mark.integration


def _params(workspace: Path, secret: str) -> StdioServerParameters:
    env = {"AIFAB_HOME": str(workspace), "AIFAB_API_KEY": secret, "HF_HUB_OFFLINE": "1"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return StdioServerParameters(command=sys.executable, args=["-m", "aifab", "mcp"], env=env)


async def _session(
    params: StdioServerParameters, calls: list[tuple[str, dict[str, Any]]]
) -> tuple[list[str], list[Any]]:
    async with Client(params, read_timeout_seconds=60) as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        results = [await client.call_tool(name, args) for name, args in calls]
    return tools, results


@pytest.fixture
def lake(workspace: Path, tmp_path: Path) -> None:
    path = tmp_path / "sensors.csv"
    path.write_text("device,temp\n" + "".join(f"d{i % 3},{20 + i}\n" for i in range(12)))
    ingest("sensors", str(path))


def test_viewer_gets_the_lake_tools_and_sql_stays_read_only(workspace: Path, lake: None) -> None:
    _, secret = create_key("viewer", name="mcp-viewer", rate=None, token_quota=None)
    tools, results = asyncio.run(
        _session(
            _params(workspace, secret),
            [
                ("list_datasets", {}),
                (
                    "sql",
                    {
                        "query": "SELECT device, count(*) AS n FROM sensors "
                        "GROUP BY device ORDER BY device"
                    },
                ),
                ("sql", {"query": "COPY (SELECT 1) TO '/tmp/aifab-mcp.csv'"}),
            ],
        )
    )
    assert tools == ["list_datasets", "sql"]
    datasets, counts, refused = results
    assert not datasets.is_error and json.loads(datasets.content[0].text)["name"] == "sensors"
    assert json.loads(counts.content[0].text)["rows"] == [
        {"device": "d0", "n": 4},
        {"device": "d1", "n": 4},
        {"device": "d2", "n": 4},
    ]
    assert refused.is_error and "only SELECT is allowed" in refused.content[0].text
    assert not Path("/tmp/aifab-mcp.csv").exists()


def test_sql_that_outgrows_its_memory_limit_stops_with_a_reason(
    workspace: Path, lake: None
) -> None:
    """Issue 31, item 3: DuckDB ran with no memory limit (a 20 GB string_agg took 4.2 GB)."""
    _, secret = create_key("viewer", name="mcp-bomb", rate=None, token_quota=None)
    bomb = "SELECT length(string_agg(repeat('x', 1000000), '')) AS n FROM range(1000)"
    _, results = asyncio.run(
        _session(
            _params(workspace, secret),
            [("sql", {"query": bomb}), ("sql", {"query": "SELECT count(*) AS n FROM sensors"})],
        )
    )
    refused, after = results
    assert refused.is_error and "over its memory limit" in refused.content[0].text
    assert json.loads(after.content[0].text)["rows"] == [{"n": 12}]


def test_client_gets_predict_only(workspace: Path) -> None:
    _, secret = create_key("client", name="mcp-client", rate=None, token_quota=None)
    tools, [result] = asyncio.run(
        _session(
            _params(workspace, secret), [("predict", {"deployment": "churn", "records": [{}]})]
        )
    )
    assert tools == ["predict"]
    assert result.is_error and "deployment churn" in result.content[0].text  # none here


def test_bad_or_revoked_key_is_one_line(workspace: Path) -> None:
    key, secret = create_key("viewer", name="gone", rate=None, token_quota=None)
    revoke_key(key["id"])
    env = {**os.environ, "AIFAB_HOME": str(workspace), "AIFAB_API_KEY": secret}
    done = subprocess.run(
        [sys.executable, "-m", "aifab", "mcp"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "error: aifab mcp: the API key is invalid or revoked"


def test_a_session_stops_answering_once_its_key_is_revoked(workspace: Path, lake: None) -> None:
    """Issue 19, item 9: the session kept answering ``sql`` after its key was revoked."""
    key, secret = create_key("viewer", name="revoked-mid-session", rate=None, token_quota=None)

    async def session() -> list[Any]:
        async with Client(_params(workspace, secret), read_timeout_seconds=60) as client:
            before = await client.call_tool("sql", {"query": "SELECT count(*) AS n FROM sensors"})
            revoke_key(key["id"])
            after = [
                await client.call_tool("sql", {"query": "SELECT count(*) AS n FROM sensors"}),
                await client.call_tool("list_datasets", {}),
            ]
        return [before, *after]

    before, sql_after, list_after = asyncio.run(session())
    assert not before.is_error
    for result in (sql_after, list_after):
        assert result.is_error and "revoked" in result.content[0].text


def test_a_revoked_keys_session_refuses_list_tools(workspace: Path, lake: None) -> None:
    """Issue 31, item 12: after revocation the session still answered ``list_tools``."""
    key, secret = create_key("viewer", name="revoked-then-listed", rate=None, token_quota=None)

    async def session() -> tuple[list[str], MCPError]:
        async with Client(_params(workspace, secret), read_timeout_seconds=60) as client:
            before = sorted(t.name for t in (await client.list_tools()).tools)
            revoke_key(key["id"])
            with pytest.raises(MCPError) as refused:
                await client.list_tools()
        return before, refused.value

    before, refused = asyncio.run(session())
    assert before == ["list_datasets", "sql"]
    assert "revoked" in str(refused)
