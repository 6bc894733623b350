"""Tool schemas from type hints, argument checks, the SQL guard and the HTTP address guard."""

from __future__ import annotations

import http.server
import threading
from typing import Literal

import pytest

from aifab.agents import ToolContext, ToolError, check_arguments, tool_from_function
from aifab.agents.builtin_tools import check_select
from aifab.agents.http_tool import http_get_tool


def lookup(
    city: str, days: int = 3, units: Literal["c", "f"] = "c", tags: list[str] | None = None
) -> dict:
    """Look up the weather forecast.

    Args:
        city: the city's name,
            as people write it.
        days: how many days ahead.
        units: c or f.
        tags: labels to filter by.
    """
    return {"city": city, "days": days}


def test_schema_comes_from_hints_and_docstring() -> None:
    tool = tool_from_function(lookup)
    assert tool.name == "lookup"
    assert tool.description == "Look up the weather forecast."
    params = tool.parameters
    assert params["required"] == ["city"]
    assert params["additionalProperties"] is False
    assert params["properties"]["city"] == {
        "type": "string",
        "description": "the city's name, as people write it.",
    }
    assert params["properties"]["days"] == {
        "type": "integer",
        "description": "how many days ahead.",
        "default": 3,
    }
    assert params["properties"]["units"]["enum"] == ["c", "f"]
    assert params["properties"]["tags"]["type"] == "array"
    assert tool.openai()["function"]["name"] == "lookup"


def test_unannotated_parameter_is_refused() -> None:
    def bad(x):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(TypeError, match="'x' has no type annotation"):
        tool_from_function(bad)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ("{}", "'city' is a required property"),
        ('{"city": "Oslo", "days": "three"}', "days: 'three' is not of type 'integer'"),
        ('{"city": "Oslo", "extra": 1}', "Additional properties"),
        ('{"city": "Oslo", "units": "k"}', "units: 'k' is not one of"),
    ],
)
def test_bad_arguments_name_the_problem(raw: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        check_arguments(tool_from_function(lookup), raw)


def test_good_arguments_parse() -> None:
    args = check_arguments(tool_from_function(lookup), '{"city": "Oslo", "days": 2}')
    assert args == {"city": "Oslo", "days": 2}


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("COPY (SELECT 1) TO '/tmp/x.csv'", "not COPY"),
        ("SELECT 1; DROP TABLE x", "got 2 statements"),
        ("ATTACH 'x.db'", "not ATTACH"),
        ("PRAGMA version", "not PRAGMA"),
        ("SELEC 1", "does not parse"),
    ],
)
def test_only_one_select_passes(sql: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        check_select(sql)
    check_select("WITH a AS (SELECT 1 AS x) SELECT * FROM a")


@pytest.fixture
def local_page() -> str:
    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            if self.path == "/hop":
                self.send_response(302)
                self.send_header("Location", "http://example.invalid/")
                self.end_headers()
                return
            body = b"x" * 5000
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_http_get_refuses_hosts_off_the_list_and_private_addresses(local_page: str) -> None:
    ctx = ToolContext()
    listed = http_get_tool({"allow_hosts": ["127.0.0.1"]}, ctx)
    with pytest.raises(ToolError, match="non-public address"):
        listed.fn(url=local_page + "/")
    other = http_get_tool({"allow_hosts": ["*.example.org"]}, ctx)
    with pytest.raises(ToolError, match="not on this agent's allow-list"):
        other.fn(url=local_page + "/")
    with pytest.raises(ToolError, match="only http"):
        other.fn(url="file:///etc/passwd")


def test_http_get_with_private_allowed_caps_size_and_rechecks_redirects(local_page: str) -> None:
    tool = http_get_tool(
        {"allow_hosts": ["127.0.0.1"], "allow_private": True, "max_bytes": 1000}, ToolContext()
    )
    page = tool.fn(url=local_page + "/")
    assert page["status"] == 200
    assert page["truncated"] is True
    assert len(page["text"]) == 1000
    with pytest.raises(ToolError, match="example.invalid is not on this agent's allow-list"):
        tool.fn(url=local_page + "/hop")
