"""Issue 19, item 3: what an agent run may do follows the caller's role, by the same rule as MCP.

A client key (``invoke``, no ``read``) running an agent that has the ``sql`` tool could list
``lake/pending/**`` (other devices' unsealed batches) and read lake objects by path. The model
is the STAND-IN scripted chat server of conftest.py (no outside LLM is reachable here).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.unit.agents.conftest import StandInLLM, answer, tool_call

from aifab.agents import create_agent, get_trace
from aifab.core.workspace import get_workspace


@pytest.fixture
def client() -> Iterator[TestClient]:
    from aifab.serve.app import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def stand_in() -> Iterator[StandInLLM]:
    # Its own stand-in: the session one's request log is read by index in test_runs.py.
    server = StandInLLM()
    yield server
    server.stop()


def _secret(role: str) -> str:
    from aifab.serve.keys import create_key

    return create_key(role, rate=None, token_quota=None)[1]


def test_a_client_key_gets_no_lake_reads_through_an_agent(
    client: TestClient, stand_in: StandInLLM
) -> None:
    pending = get_workspace().lake / "pending" / "sensors"
    pending.mkdir(parents=True)
    (pending / "batch-secret.parquet").write_bytes(b"PAR1")
    query = f"SELECT * FROM glob('{get_workspace().lake}/pending/**')"

    def script(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        if not any(m["role"] == "tool" for m in messages):
            return tool_call("sql", {"query": query})
        return answer("done")

    stand_in.scripts["lake-reader"] = script
    create_agent(
        {
            "name": "lake-reader",
            "model": {"model": "lake-reader", "base_url": stand_in.base_url},
            "tools": [{"use": "sql"}, {"use": "http_get", "options": {"allow_hosts": ["x.org"]}}],
        }
    )
    start = len(stand_in.requests)
    headers = {"Authorization": f"Bearer {_secret('client')}"}
    r = client.post("/v1/agents/lake-reader/runs", json={"input": "list it"}, headers=headers)
    assert r.status_code == 200, r.text
    offered = {t["function"]["name"] for t in stand_in.requests[start].get("tools") or []}
    assert offered == {"http_get"}  # sql needs `read`, as over MCP
    trace = json.dumps(get_trace(r.json()["id"]))
    assert "batch-secret" not in trace

    # A developer (who may read) still gets the tool and its rows.
    headers = {"Authorization": f"Bearer {_secret('developer')}"}
    r = client.post("/v1/agents/lake-reader/runs", json={"input": "list it"}, headers=headers)
    assert r.status_code == 200, r.text
    assert "batch-secret" in json.dumps(get_trace(r.json()["id"]))
