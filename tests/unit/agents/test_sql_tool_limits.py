"""Issue 19, item 2: the ``sql`` tool's timeout stops the DuckDB query instead of abandoning it
(an abandoned query kept a core busy long after "took longer than 5 s")."""

from __future__ import annotations

import threading

import pytest

from aifab.agents import ToolContext, ToolError
from aifab.agents.builtin_tools import sql_tool
from aifab.core.errors import InvalidInputError

SLOW = "SELECT sum(a.range * b.range) AS s FROM range(100000) a, range(100000) b"


def _busy_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("aifab-tool") and t.is_alive()]


def test_the_timeout_stops_the_query() -> None:
    tool = sql_tool({"timeout_s": 0.5}, ToolContext())
    with pytest.raises(ToolError, match="stopped"):
        tool.fn(query=SLOW)
    # Nothing is left running once the tool has answered.
    assert _busy_threads() == []
    assert tool.fn(query="SELECT 41 + 1 AS n")["rows"] == [{"n": 42}]


def test_data_query_stops_at_its_time_limit() -> None:
    from aifab.data import query

    with pytest.raises(InvalidInputError, match="stopped at its time limit"):
        query(SLOW, timeout_s=0.3)
