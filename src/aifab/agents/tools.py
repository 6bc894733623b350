"""Tools an agent may call: a name, a JSON schema of its arguments, and the function behind it.

A tool is built from a typed Python function (:func:`tool_from_function` reads the schema from
the type hints and the argument descriptions from the Google-style docstring) or taken from the
built-ins by name (:data:`BUILTIN_TOOLS`, resolved lazily like handlers and executors).
"""

from __future__ import annotations

import functools
import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin

from aifab.core.errors import InvalidInputError
from aifab.core.registry import Registry

__all__ = [
    "BUILTIN_TOOLS",
    "TOOL_PERMISSIONS",
    "Tool",
    "ToolContext",
    "ToolError",
    "check_arguments",
    "may_use",
    "tool_from_function",
]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


class ToolError(Exception):
    """A tool refused its arguments or failed; the message goes back to the model."""


@dataclass(frozen=True)
class Tool:
    """One callable tool, described the way the OpenAI tools protocol wants it."""

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any] = field(repr=False)

    def openai(self) -> dict[str, Any]:
        """The ``tools`` entry of a chat request."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


@dataclass(frozen=True)
class ToolContext:
    """What built-in tools may reach in one run: the gateway and the caller's key."""

    #: Base URL of the aifab server (``http://127.0.0.1:8000``); None: no gateway tools.
    gateway_url: str | None = None
    #: The caller's API key, so gateway calls carry the caller's role and limits.
    api_key: str | None = field(default=None, repr=False)
    #: What the caller's role may do (``read``, ``invoke``...); None: a local run by the
    #: workspace's operator (CLI, pipeline step), who may use every tool.
    permissions: frozenset[str] | None = None


#: Built-in tools by name; each entry is a factory taking the tool's YAML options and the run's
#: :class:`ToolContext` and returning a :class:`Tool`.
BUILTIN_TOOLS = Registry(
    "tool",
    {
        "sql": "aifab.agents.builtin_tools:sql_tool",
        "predict": "aifab.agents.builtin_tools:predict_tool",
        "http_get": "aifab.agents.http_tool:http_get_tool",
        "kb_search": "aifab.agents.builtin_tools:kb_search_tool",
    },
)


#: The permission a caller needs for each tool kind. One rule for agent runs on the gateway and
#: for MCP sessions: a tool reading the lake needs ``read``; one acting for the caller ``invoke``.
TOOL_PERMISSIONS: dict[str, str] = {
    "sql": "read",
    "kb_search": "read",
    "list_datasets": "read",
    "predict": "invoke",
    "http_get": "invoke",
}


def may_use(kind: str, permissions: frozenset[str] | None) -> bool:
    """Whether a caller with ``permissions`` may use a tool of ``kind`` (an unknown kind: no).

    Args:
        kind: the built-in tool's kind (``use`` in the agent's YAML, or an MCP tool's name).
        permissions: the caller role's permissions; None for the workspace's operator.
    """
    if permissions is None:
        return True
    needed = TOOL_PERMISSIONS.get(kind)
    return needed is not None and needed in permissions


def _json_type(hint: Any) -> dict[str, Any]:
    """The JSON schema of one annotation (scalars, Optional, Literal, list, dict)."""
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    origin = get_origin(hint)
    args = get_args(hint)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _json_type(inner[0])
        return {"anyOf": [_json_type(a) for a in inner]}
    if origin is list or hint is list:
        return {"type": "array", "items": _json_type(args[0])} if args else {"type": "array"}
    if origin is dict or hint is dict:
        return {"type": "object"}
    raise TypeError(f"unsupported annotation {hint!r}: use str, int, float, bool, list, Literal")


def _arg_docs(doc: str) -> tuple[str, dict[str, str]]:
    """A Google-style docstring -> (summary, {argument: description})."""
    summary = doc.strip().split("\n\n", 1)[0].replace("\n", " ").strip()
    described: dict[str, str] = {}
    section = re.search(r"^\s*Args:\s*\n(.*?)(?:^\s*\w+:\s*$|\Z)", doc, re.M | re.S)
    if section:
        current = None
        for line in section.group(1).splitlines():
            item = re.match(r"\s+(\w+)(?:\s*\(.*?\))?:\s*(.*)", line)
            if item and (current is None or len(line) - len(line.lstrip()) <= 8):
                current = item.group(1)
                described[current] = item.group(2).strip()
            elif current and line.strip():
                described[current] += " " + line.strip()
    return summary, described


def tool_from_function(fn: Callable[..., Any], name: str | None = None) -> Tool:
    """A :class:`Tool` whose schema comes from ``fn``'s type hints and docstring.

    Args:
        fn: a function with annotated keyword-compatible parameters.
        name: the tool's name (default: the function's).

    Raises:
        TypeError: a parameter has no annotation or an unsupported one.
    """
    tool_name = name or fn.__name__
    if not _NAME.fullmatch(tool_name):
        raise InvalidInputError(f"tool name {tool_name!r}: letters, digits, '_' and '-' only")
    hints = typing.get_type_hints(fn)
    summary, described = _arg_docs(inspect.getdoc(fn) or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if pname not in hints:
            raise TypeError(f"tool {tool_name}: parameter {pname!r} has no type annotation")
        prop = _json_type(hints[pname])
        if pname in described:
            prop["description"] = described[pname]
        if param.default is inspect.Parameter.empty:
            required.append(pname)
        else:
            prop["default"] = param.default
        properties[pname] = prop
    schema = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return Tool(tool_name, summary or tool_name, schema, fn)


def check_arguments(tool: Tool, raw: str | dict[str, Any] | None) -> dict[str, Any]:
    """Parse and validate a tool call's arguments against the tool's schema.

    Args:
        tool: the tool called.
        raw: the ``arguments`` string the model produced (JSON), or an already-parsed object.

    Raises:
        ToolError: not JSON, not an object, or not valid for the schema (the message says where).
    """
    import json

    if raw is None or raw == "":
        args: Any = {}
    elif isinstance(raw, str):
        try:
            args = json.loads(raw)
        except ValueError as exc:
            raise ToolError(f"arguments of {tool.name} are not valid JSON: {exc}") from None
    else:
        args = raw
    if not isinstance(args, dict):
        raise ToolError(f"arguments of {tool.name} must be a JSON object")
    validator = _validator(json.dumps(tool.parameters, sort_keys=True))
    errors = sorted(validator.iter_errors(args), key=lambda e: (list(e.absolute_path), e.message))
    if errors:
        # Every problem at once (up to 3), so the model can fix its call in one more step.
        problems = "; ".join(
            f"{'/'.join(str(p) for p in e.absolute_path) or 'arguments'}: {e.message}"
            for e in errors[:3]
        )
        raise ToolError(f"arguments of {tool.name}: {problems}")
    return args


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str) -> Any:
    """A compiled validator per schema: checking the schema itself on every call costs ms."""
    import json

    import jsonschema

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)
