"""Function calling for aifab's own LMs: tools into the prompt, ``tool_calls`` out of the text.

The format is plain text the chat template can carry and a small model can learn: the system
message lists the tools as JSON, the model answers a call as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (one block per call), and tool
results come back as ``tool`` messages. With ``tool_choice`` ``required`` or a named function
the call is decoded under a JSON-schema constraint (the union of the tools' schemas for
``required``), so it always parses and validates; with ``auto`` the text
is parsed, and a malformed block is reported, never raised.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from aifab.core.errors import InvalidInputError

__all__ = [
    "CALL_CLOSE",
    "CALL_OPEN",
    "ParsedOutput",
    "call_schema",
    "parse_tool_calls",
    "template_messages",
    "tools_prompt",
]

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"
_BLOCK = re.compile(re.escape(CALL_OPEN) + r"(.*?)(?:" + re.escape(CALL_CLOSE) + r"|$)", re.S)


def _functions(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(fn, dict) or not fn.get("name"):
            raise InvalidInputError(
                f"tools[{i}]: expected {{'type': 'function', 'function': {{'name': ...}}}}"
            )
        out.append(fn)
    return out


def tools_prompt(tools: list[dict[str, Any]]) -> str:
    """The system text that offers ``tools`` (OpenAI ``tools`` entries) to the model.

    Compact on purpose: small models have small contexts, and every request carries it.
    """
    specs = []
    for fn in _functions(tools):
        spec = {"name": fn["name"]}
        if fn.get("description"):
            spec["description"] = fn["description"]
        spec["parameters"] = fn.get("parameters", {"type": "object"})
        specs.append(spec)
    return (
        f'Tools (call one as {CALL_OPEN}{{"name":...,"arguments":{{...}}}}{CALL_CLOSE}): '
        + json.dumps(specs, separators=(",", ":"))
    )


def template_messages(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> list[dict[str, str]]:
    """OpenAI chat messages (tool calls and results too) as ``{role, content}`` for the template.

    The tools are offered in a system message first.
    """
    out: list[dict[str, str]] = []
    if tools:
        out.append({"role": "system", "content": tools_prompt(tools)})
    for message in messages:
        role = "system" if message["role"] == "developer" else message["role"]
        content = str(message.get("content") or "")
        for call in message.get("tool_calls") or []:
            fn = call.get("function", {})
            try:
                arguments = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                arguments = fn.get("arguments")
            block = json.dumps(
                {"name": fn.get("name"), "arguments": arguments}, separators=(",", ":")
            )
            content += f"{CALL_OPEN}{block}{CALL_CLOSE}"
        out.append({"role": role, "content": content})
    return out


def call_schema(
    tools: list[dict[str, Any]], choice: str | dict[str, Any] | None
) -> dict[str, Any] | None:
    """The JSON schema a forced call is decoded under, or None when the model may answer freely.

    ``required`` (LangChain's ``any``) decodes under the union of the tools' calls: once the
    name is written, the arguments follow that tool's parameter schema. Parameters beyond the
    decoder's subset are decoded as any object (the call still parses).

    Args:
        tools: the request's tools.
        choice: ``tool_choice``: ``required``, ``{"type": "function", "function": {"name"}}``,
            or ``auto``/``none``/None (not forced).

    Raises:
        InvalidInputError: a named function that is not among the tools.
    """
    functions = _functions(tools)
    if choice in ("required", "any"):
        chosen = functions
    elif isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        chosen = [fn for fn in functions if fn["name"] == name]
        if not chosen:
            raise InvalidInputError(f"tool_choice: function {name!r} is not among the tools")
    else:
        return None
    branches = [_call_branch(fn) for fn in chosen]
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _call_branch(fn: dict[str, Any]) -> dict[str, Any]:
    from aifab.inference.json_schema import compile_schema

    arguments = fn.get("parameters") or {"type": "object"}
    try:
        compile_schema(arguments)
    except InvalidInputError:
        arguments = {"type": "object"}  # parameters beyond the decoder's subset: any object
    return {
        "type": "object",
        "properties": {"name": {"const": fn["name"]}, "arguments": arguments},
        "required": ["name", "arguments"],
    }


@dataclass
class ParsedOutput:
    """A completion split into text and tool calls (OpenAI's shape), with any faults found."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def parse_tool_calls(
    text: str, tools: list[dict[str, Any]], *, parallel: bool = True, call_id: str = "call"
) -> ParsedOutput:
    """Find ``<tool_call>`` blocks in ``text``; calls to unknown tools or bad JSON are errors.

    Args:
        text: the model's output.
        tools: the tools offered (a call to anything else is refused).
        parallel: keep every call (``parallel_tool_calls``), or only the first.
        call_id: the prefix of the calls' ids.
    """
    names = {fn["name"] for fn in _functions(tools)}
    calls: list[dict[str, Any]] = []
    errors: list[str] = []
    for i, match in enumerate(_BLOCK.finditer(text)):
        body = match.group(1).strip()
        try:
            call = json.loads(body)
            name, arguments = call["name"], call.get("arguments", {})
            if isinstance(arguments, str):
                # Arguments as JSON text, as OpenAI's messages carry them: still a call.
                arguments = json.loads(arguments or "{}")
            if not isinstance(name, str) or not isinstance(arguments, dict):
                raise TypeError("name must be a string and arguments an object")
        except (ValueError, KeyError, TypeError) as exc:
            errors.append(f"tool call {i}: malformed ({exc}): {body[:200]!r}")
            continue
        if name not in names:
            errors.append(f"tool call {i}: {name!r} is not among the tools")
            continue
        calls.append(
            {
                "id": f"{call_id}_{len(calls)}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        )
    if not parallel:
        calls = calls[:1]
    rest = _BLOCK.sub("", text).strip()
    if not calls and not rest:
        # Only broken blocks: their text is the answer (reported in errors), not '' - an empty
        # answer reads as "no answer" to agent frameworks, and the output would be lost.
        rest = text.strip()
    return ParsedOutput(rest or None, calls, errors)
