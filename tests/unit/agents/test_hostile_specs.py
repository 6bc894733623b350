"""Issue 19, item 12: an agent's tool options nested hundreds deep are a 4xx naming the field,
not a 500 from the serializer's depth limit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from aifab.agents import parse_spec
from aifab.core.errors import InvalidInputError


def _nested(depth: int, step: Any = dict) -> dict[str, Any]:
    root: dict[str, Any] = {}
    cur = root
    for _ in range(depth):
        cur["a"] = step()
        cur = cur["a"] if isinstance(cur["a"], dict) else cur["a"][0]
    return root


def _spec(options: dict[str, Any]) -> dict[str, Any]:
    return {"name": "deep", "model": {"model": "x"}, "tools": [{"use": "sql", "options": options}]}


def test_deeply_nested_tool_options_are_refused() -> None:
    with pytest.raises(InvalidInputError, match="nested"):
        parse_spec(_spec(_nested(480)))
    with pytest.raises(InvalidInputError, match="nested"):
        parse_spec(_spec(_nested(480, lambda: [{}])))
    # Ordinary options (a few levels) still pass.
    parse_spec(_spec({"name": "q", "extra": {"x": [1, {"y": 2}]}}))


@pytest.fixture
def client() -> Iterator[TestClient]:
    from aifab.serve.app import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as c:
        yield c


def test_http_deeply_nested_tool_options_are_a_4xx(client: TestClient) -> None:
    from aifab.serve.keys import create_key

    _, secret = create_key("developer", rate=None)
    r = client.post(
        "/v1/agents", json=_spec(_nested(480)), headers={"Authorization": f"Bearer {secret}"}
    )
    assert r.status_code == 422, r.text
    assert "nested" in r.json()["error"]["message"]
