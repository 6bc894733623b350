"""JSON schema -> the nodes constrained decoding walks, with each node's shortest instance.

Supported: ``type`` object (``properties``, ``required``; no other keys allowed), array
(``items``, ``minItems``, ``maxItems``), string (``minLength``, ``maxLength``), number and
integer (``minimum``, ``maximum``; exclusive bounds on integers), boolean, null, a ``type``
list of scalars, ``enum``/``const`` of strings, ``{}`` (any JSON value), and ``anyOf`` of
objects told apart by a ``const`` string property (a discriminated union: the tool name of a
forced call picks its arguments' schema). Other keywords are refused, naming the keyword.

Lengths are counted in characters; decoding assumes the vocabulary has a token for each single
character it may need to close a structure (byte-level BPE vocabularies do), so a budget of
``n`` characters is always enough for ``n`` tokens.
"""

from __future__ import annotations

import math
from decimal import Decimal
from functools import lru_cache
from typing import Any

from aifab.core.errors import InvalidInputError

__all__ = ["MAX_DIGITS", "Bounds", "Node", "compile_schema", "min_lengths", "number_extension"]

_IGNORED = {"title", "description", "default", "examples", "$schema", "additionalProperties"}
_KNOWN = {"type", "properties", "required", "items", "enum", "const", "minItems", "maxItems"}
_KNOWN |= {"minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
_KNOWN |= {"anyOf"}
_LITERALS = {"boolean": ("true", "false"), "null": ("null",)}
_SCALARS = ("string", "number", "integer", "boolean", "null")
#: Digits allowed in a number's integer part and in its fraction: a float keeps ~15 significant
#: digits, and an unbounded run of digits is how a small model fills its budget.
MAX_DIGITS = 15

# A compiled node: (kind, data). Kinds: "any", "any_object", "object" (props, required),
# "tagged" (key, enum node, {value: object node}), "array" (items, min, max), "string"
# (None: free; (min, max): counted; frozenset: enum), "number"/"integer" (Bounds or None),
# "literal" (words), "union" (node ids). Frames on the acceptor's stack refer to nodes by index.
Node = tuple[str, Any]
Bounds = tuple[Decimal | None, Decimal | None]


def compile_schema(schema: dict[str, Any]) -> list[Node]:
    """Compile a JSON schema into nodes (node 0 is the root).

    Raises:
        InvalidInputError: a keyword or type outside the supported subset (named), or bounds
            no value satisfies.
    """
    nodes: list[Node] = []
    _compile(schema, nodes, "schema")
    return nodes


def _compile(schema: Any, nodes: list[Node], where: str) -> int:
    if not isinstance(schema, dict):
        raise InvalidInputError(f"{where}: a schema must be an object")
    index = len(nodes)
    nodes.append(("any", None))
    unknown = set(schema) - _IGNORED - _KNOWN
    if unknown:
        raise InvalidInputError(f"{where}: unsupported JSON-schema keyword {sorted(unknown)[0]!r}")
    if "anyOf" in schema:
        nodes[index] = _tagged(schema["anyOf"], nodes, where)
        return index
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not values or not all(isinstance(v, str) for v in values):
            raise InvalidInputError(f"{where}: enum/const must be non-empty lists of strings")
        nodes[index] = ("string", frozenset(values))
        return index
    kind = schema.get("type")
    if isinstance(kind, list):
        if not kind or not all(k in _SCALARS for k in kind):
            raise InvalidInputError(f"{where}: a type list may name only {', '.join(_SCALARS)}")
        subs = tuple(_compile({"type": k}, nodes, where) for k in kind)
        nodes[index] = ("union", subs)
    elif kind == "object":
        nodes[index] = _object(schema, nodes, where)
    elif kind == "array":
        items = _compile(schema.get("items", {}), nodes, f"{where}.items")
        lo, hi = _count(schema, "minItems", where), schema.get("maxItems")
        if hi is not None and _count(schema, "maxItems", where) < lo:
            raise InvalidInputError(f"{where}: maxItems is below minItems")
        nodes[index] = ("array", (items, lo, hi))
    elif kind == "string":
        lo, hi = _count(schema, "minLength", where), schema.get("maxLength")
        if hi is not None and _count(schema, "maxLength", where) < lo:
            raise InvalidInputError(f"{where}: maxLength is below minLength")
        nodes[index] = ("string", None if lo == 0 and hi is None else (lo, hi))
    elif kind in ("number", "integer"):
        nodes[index] = (kind, _bounds(schema, kind == "integer", where))
    elif kind in _LITERALS:
        nodes[index] = ("literal", _LITERALS[kind])
    elif kind is not None:
        raise InvalidInputError(f"{where}: unsupported type {kind!r}")
    return index


def _count(schema: dict[str, Any], key: str, where: str) -> int:
    value = schema.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInputError(f"{where}: {key} must be a non-negative integer")
    return value


def _object(schema: dict[str, Any], nodes: list[Node], where: str) -> Node:
    props = schema.get("properties")
    if props is None:
        return ("any_object", None)
    if not isinstance(props, dict):
        raise InvalidInputError(f"{where}.properties: must be an object")
    for name in props:
        if '"' in name or "\\" in name or any(ord(c) < 0x20 for c in name):
            raise InvalidInputError(f"{where}.properties: {name!r} needs escaping in JSON")
    ids = {k: _compile(v, nodes, f"{where}.properties.{k}") for k, v in props.items()}
    required = frozenset(schema.get("required", []))
    if not required <= set(ids):
        raise InvalidInputError(f"{where}: required names a property not in properties")
    return ("object", (ids, required))


def _tagged(branches: Any, nodes: list[Node], where: str) -> Node:
    """``anyOf`` objects that share a required property whose ``const`` tells them apart."""
    problem = f"{where}: 'anyOf' is supported only over objects told apart by a const property"
    if not isinstance(branches, list) or not branches:
        raise InvalidInputError(problem)
    if not all(isinstance(b, dict) and b.get("type") == "object" for b in branches):
        raise InvalidInputError(problem)
    first = branches[0].get("properties") or {}
    tag = next(
        (
            k
            for k in first
            if all(
                isinstance((b.get("properties") or {}).get(k, {}).get("const"), str)
                and k in b.get("required", [])
                for b in branches
            )
        ),
        None,
    )
    if tag is None:
        raise InvalidInputError(problem)
    values = [b["properties"][tag]["const"] for b in branches]
    if len(set(values)) != len(values):
        raise InvalidInputError(f"{where}: anyOf branches repeat the {tag!r} value")
    enum_node = len(nodes)
    nodes.append(("string", frozenset(values)))
    table = {
        v: _compile(b, nodes, f"{where}.anyOf[{i}]")
        for i, (v, b) in enumerate(zip(values, branches, strict=True))
    }
    return ("tagged", (tag, enum_node, table))


def _bounds(schema: dict[str, Any], integer: bool, where: str) -> Bounds | None:
    def number(key: str) -> Decimal | None:
        value = schema.get(key)
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise InvalidInputError(f"{where}: {key} must be a finite number")
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)

    lo, hi = number("minimum"), number("maximum")
    xlo, xhi = number("exclusiveMinimum"), number("exclusiveMaximum")
    if (xlo is not None or xhi is not None) and not integer:
        raise InvalidInputError(f"{where}: exclusive bounds are supported on integers only")
    if xlo is not None:
        lo = (
            max(lo, Decimal(math.floor(xlo) + 1))
            if lo is not None
            else Decimal(math.floor(xlo) + 1)
        )
    if xhi is not None:
        hi = min(hi, Decimal(math.ceil(xhi) - 1)) if hi is not None else Decimal(math.ceil(xhi) - 1)
    if lo is None and hi is None:
        return None
    bounds = (lo, hi)
    if number_start(bounds, integer) is None:
        raise InvalidInputError(f"{where}: no {'integer' if integer else 'number'} is in bounds")
    return bounds


def _in(value: Decimal, lo: Decimal | None, hi: Decimal | None) -> bool:
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def _least_decimal(x: Decimal, d: int) -> Decimal:
    """The smallest number with ``d`` fraction digits that is >= ``x``."""
    scale = Decimal(10) ** d
    return Decimal(math.ceil(x * scale)) / scale


def _positive_extension(
    ip: str, fp: str | None, lo: Decimal | None, hi: Decimal | None, integer: bool
) -> int | None:
    """Fewest characters that complete the non-negative prefix ``ip[.fp]`` within bounds."""
    value = Decimal(ip)
    if fp is not None:  # the integer part is fixed: only fraction digits may follow
        base = value + (Decimal("0." + fp) if fp else 0)
        width = Decimal(10) ** -len(fp)  # what the digits still to come can add, at most
        for d in range(0 if fp else 1, MAX_DIGITS - len(fp) + 1):
            least = base if lo is None or lo <= base else _least_decimal(lo, len(fp) + d)
            if least < base + width and _in(least, lo, hi):
                return d
        return None
    best: int | None = None
    more = 1 if ip == "0" else MAX_DIGITS - len(ip) + 1  # no digit may follow a leading 0
    for k in range(more):
        a, b = value * 10**k, (value + 1) * 10**k  # the values k more digits reach: [a, b)
        low = a if lo is None else max(a, lo)
        if _in(Decimal(math.ceil(low)), lo, hi) and math.ceil(low) < b:
            return k if best is None else min(best, k)
        if integer or (best is not None and best <= k + 2):
            continue
        for d in range(1, MAX_DIGITS + 1):  # k digits, a dot and d fraction digits
            least = _least_decimal(low, d)
            if least < b and _in(least, lo, hi):
                best = k + 1 + d if best is None else min(best, k + 1 + d)
                break
    return best


@lru_cache(maxsize=65536)
def number_extension(text: str, bounds: Bounds | None, integer: bool) -> int | None:
    """Fewest characters after ``text`` (a number's prefix) that make a number within bounds.

    None when no completion is within bounds. Exponents are not used under bounds.
    """
    if bounds is None:
        return 0 if text and text[-1].isdigit() else 1
    lo, hi = bounds
    negative = text.startswith("-")
    body = text[1:] if negative else text
    if negative:
        lo, hi = (None if hi is None else -hi), (None if lo is None else -lo)
    if not body:
        costs = [number_extension(text + c, bounds, integer) for c in "0123456789"]
        found = [c for c in costs if c is not None]
        return 1 + min(found) if found else None
    ip, dot, fp = body.partition(".")
    return _positive_extension(ip, fp if dot else None, lo, hi, integer)


def number_start(bounds: Bounds | None, integer: bool) -> int | None:
    """Characters of the shortest number within bounds (None: there is none)."""
    costs = [number_extension(c, bounds, integer) for c in "-0123456789"]
    found = [c for c in costs if c is not None]
    return 1 + min(found) if found else None


def min_lengths(nodes: list[Node]) -> list[int]:
    """Each node's shortest valid instance, in characters of compact JSON."""
    out: list[int | None] = [None] * len(nodes)

    def size(i: int) -> int:
        hit = out[i]
        if hit is not None:
            return hit
        kind, data = nodes[i]
        if kind == "any":
            n = 1
        elif kind == "any_object":
            n = 2
        elif kind == "object":
            props, required = data
            n = 2 + sum(len(p) + 3 + size(props[p]) for p in required) + max(len(required) - 1, 0)
        elif kind == "tagged":
            n = min(size(b) for b in data[2].values())
        elif kind == "array":
            items, lo, _ = data
            n = 2 + lo * size(items) + max(lo - 1, 0)
        elif kind == "string":
            n = 2 + (min(map(len, data)) if isinstance(data, frozenset) else data[0] if data else 0)
        elif kind in ("number", "integer"):
            n = number_start(data, kind == "integer") or 1
        elif kind == "literal":
            n = min(map(len, data))
        else:  # union
            n = min(size(s) for s in data)
        out[i] = n
        return n

    return [size(i) for i in range(len(nodes))]
