"""Tool schemas into the prompt, tool calls out of the text; forced calls under a schema."""

from __future__ import annotations

import json

import pytest

from aifab.core.errors import InvalidInputError
from aifab.inference.tool_calls import (
    call_schema,
    parse_tool_calls,
    template_messages,
    tools_prompt,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "sql",
            "description": "Run SQL",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    },
    {"type": "function", "function": {"name": "predict", "parameters": {"type": "object"}}},
]


def test_prompt_lists_the_tools() -> None:
    text = tools_prompt(TOOLS)
    assert '"name":"sql"' in text and '"name":"predict"' in text and "<tool_call>" in text
    with pytest.raises(InvalidInputError, match=r"tools\[0\]"):
        tools_prompt([{"type": "function", "function": {}}])


def test_history_with_calls_and_results_renders() -> None:
    messages = [
        {"role": "user", "content": "count"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "sql", "arguments": '{"query": "SELECT 1"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "content": '{"rows": [[1]]}'},
    ]
    out = template_messages(messages, TOOLS)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "tool"]
    assert (
        out[2]["content"]
        == '<tool_call>{"name":"sql","arguments":{"query":"SELECT 1"}}</tool_call>'
    )


def test_parse_calls_text_and_faults() -> None:
    text = (
        'Let me look. <tool_call>{"name": "sql", "arguments": {"query": "SELECT 1"}}</tool_call>'
        '<tool_call>{"name": "rm", "arguments": {}}</tool_call>'
        "<tool_call>{broken</tool_call>"
        '<tool_call>{"name": "predict", "arguments": {"records": []}}'
    )
    parsed = parse_tool_calls(text, TOOLS)
    assert parsed.content == "Let me look."
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["sql", "predict"]
    assert json.loads(parsed.tool_calls[0]["function"]["arguments"]) == {"query": "SELECT 1"}
    assert [c["id"] for c in parsed.tool_calls] == ["call_0", "call_1"]
    assert len(parsed.errors) == 2
    assert "'rm' is not among the tools" in parsed.errors[0] and "malformed" in parsed.errors[1]
    assert len(parse_tool_calls(text, TOOLS, parallel=False).tool_calls) == 1
    assert parse_tool_calls("just text", TOOLS).tool_calls == []


def test_only_broken_calls_leave_their_text_as_the_answer() -> None:
    """Issue 22: an unterminated block after tool results left the answer '' (lost)."""
    parsed = parse_tool_calls('<tool_call>{"name": "sql", "argu', TOOLS)
    assert parsed.tool_calls == [] and len(parsed.errors) == 1
    assert parsed.content == '<tool_call>{"name": "sql", "argu'


def test_forced_call_schemas() -> None:
    assert call_schema(TOOLS, "auto") is None and call_schema(TOOLS, None) is None
    required = call_schema(TOOLS, "required")
    # The union of the tools' calls: the name picks its arguments' schema (issue 22: it was
    # any object, so a small model rambled until max_tokens).
    branches = {b["properties"]["name"]["const"]: b for b in required["anyOf"]}
    assert set(branches) == {"sql", "predict"}
    for fn in TOOLS:
        params = fn["function"].get("parameters") or {"type": "object"}
        assert branches[fn["function"]["name"]]["properties"]["arguments"] == params
    named = call_schema(TOOLS, {"type": "function", "function": {"name": "sql"}})
    assert named["properties"]["arguments"]["required"] == ["query"]
    with pytest.raises(InvalidInputError, match="'nope' is not among the tools"):
        call_schema(TOOLS, {"type": "function", "function": {"name": "nope"}})


@pytest.mark.parametrize(
    "text",
    [
        # arguments as the JSON text OpenAI's own messages carry
        '<tool_call>{"name": "sql", "arguments": "{\\"query\\": \\"SELECT 1\\"}"}</tool_call>',
        # a call that is the whole answer, its closing tag cut by EOS or a stop string
        '<tool_call>{"name": "sql", "arguments": {"query": "SELECT 1"}}',
        # the tags around a well-formed call, with line breaks as chat templates write them
        '<tool_call>\n{"name": "sql", "arguments": {"query": "SELECT 1"}}\n</tool_call>\n',
    ],
)
def test_a_well_formed_call_in_the_models_format_is_a_call(text: str) -> None:
    parsed = parse_tool_calls(text, TOOLS)
    assert parsed.errors == []
    assert [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls
    ] == [("sql", {"query": "SELECT 1"})]
    assert parsed.content is None
