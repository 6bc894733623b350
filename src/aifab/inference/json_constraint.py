"""Constrained decoding: only tokens that keep the output a prefix of JSON valid for a schema.

A JSON schema (the subset below) compiles to nodes; a character-level pushdown acceptor walks
them. Its state is an immutable tuple of frames, so each candidate token is tried on the same
state without copying, and the allowed-token set is memoised per state (generation revisits the
same states often: inside a free string, after a comma...). Output is compact JSON: whitespace
is allowed only inside strings, so a model cannot stall in an endless run of spaces.

Supported: ``type`` object (``properties``, ``required``; no other keys allowed), array
(``items``, ``minItems``, ``maxItems``), string (``maxLength``), number, integer, boolean, null,
a ``type`` list of those, ``enum`` of strings, ``const`` strings, and ``{}`` (any JSON value).
Other keywords are refused by :func:`compile_schema`, naming the keyword.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aifab.core.errors import InvalidInputError

__all__ = ["JsonConstraint", "TokenVocabulary", "compile_schema", "feed"]

_IGNORED = {"title", "description", "default", "examples", "$schema", "additionalProperties"}
_DIGITS = "0123456789"
_HEX = "0123456789abcdefABCDEF"
_ESCAPES = '"\\/bfnrt'
_LITERALS = {"boolean": ("true", "false"), "null": ("null",)}
_SCALARS = ("string", "number", "integer", "boolean", "null")

# A compiled node: (kind, data). Kinds: "any", "object", "array", "string", "number",
# "integer", "literal", "union". Frames on the stack refer to nodes by index.
Node = tuple[str, Any]


def compile_schema(schema: dict[str, Any]) -> list[Node]:
    """Compile a JSON schema into nodes (node 0 is the root).

    Raises:
        InvalidInputError: a keyword or type outside the supported subset (named).
    """
    nodes: list[Node] = []
    _compile(schema, nodes, "schema")
    return nodes


def _compile(schema: Any, nodes: list[Node], where: str) -> int:
    if not isinstance(schema, dict):
        raise InvalidInputError(f"{where}: a schema must be an object")
    index = len(nodes)
    nodes.append(("any", None))
    unknown = set(schema) - _IGNORED - {"type", "properties", "required", "items"}
    unknown -= {"enum", "const", "minItems", "maxItems", "maxLength"}
    if unknown:
        raise InvalidInputError(f"{where}: unsupported JSON-schema keyword {sorted(unknown)[0]!r}")
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
        props = schema.get("properties")
        if props is None:
            nodes[index] = ("any_object", None)
            return index
        ids = {k: _compile(v, nodes, f"{where}.properties.{k}") for k, v in props.items()}
        required = frozenset(schema.get("required", []))
        if not required <= set(ids):
            raise InvalidInputError(f"{where}: required names a property not in properties")
        nodes[index] = ("object", (ids, required))
    elif kind == "array":
        items = _compile(schema.get("items", {}), nodes, f"{where}.items")
        nodes[index] = ("array", (items, schema.get("minItems", 0), schema.get("maxItems")))
    elif kind == "string":
        limit = schema.get("maxLength")
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise InvalidInputError(f"{where}: maxLength must be a non-negative integer")
        nodes[index] = ("string", limit)
    elif kind in ("number", "integer"):
        nodes[index] = (kind, None)
    elif kind in _LITERALS:
        nodes[index] = ("literal", _LITERALS[kind])
    elif kind is not None:
        raise InvalidInputError(f"{where}: unsupported type {kind!r}")
    return index


# Frames (immutable tuples), the stack's top last:
#   ("val", node)                      a value of node expected next
#   ("obj", node, phase, seen, key)    phase: "{" (after the brace), "k" (in a key), ":" (key
#                                      done), "," (after a value), "n" (after a comma)
#   ("arr", node, phase, count)        phase: "[", ",", "n"
#   ("str", node, text, esc)           text typed so far (enums), its length (maxLength) or
#                                      None (free); esc: 0, 1 after a backslash, 2-5 in \uXXXX
#   ("num", integer_only, state)
#   ("lit", candidates, typed)
Frame = tuple[Any, ...]
State = tuple[Frame, ...]

_NUM_NEXT: dict[tuple[str, str], str] = {
    ("start", "-"): "sign",
    ("start", "0"): "zero",
    ("sign", "0"): "zero",
    ("zero", "."): "dot",
    ("int", "."): "dot",
    ("zero", "e"): "e",
    ("int", "e"): "e",
    ("frac", "e"): "e",
    ("zero", "E"): "e",
    ("int", "E"): "e",
    ("frac", "E"): "e",
    ("e", "+"): "esign",
    ("e", "-"): "esign",
}
_NUM_DONE = {"zero", "int", "frac", "exp"}


def _num_step(state: str, ch: str, integer: bool) -> str | None:
    if ch in _DIGITS:
        if state in ("start", "sign") and ch != "0" or state == "int":
            return "int"
        if state in ("dot", "frac"):
            return "frac"
        if state in ("e", "esign", "exp"):
            return "exp"
        return None
    nxt = _NUM_NEXT.get((state, ch))
    if nxt is not None and integer and nxt in ("dot", "e"):
        return None
    return nxt


def _done(stack: State, nodes: Sequence[Node]) -> State | None:
    """A value just ended on top of ``stack`` (already popped): advance the parent."""
    if not stack:
        return stack
    top = stack[-1]
    if top[0] == "obj":
        return (*stack[:-1], ("obj", top[1], ",", top[3], None))
    if top[0] == "arr":
        return (*stack[:-1], ("arr", top[1], ",", top[3] + 1))
    return None


def _start_value(rest: State, node: int, ch: str, nodes: Sequence[Node]) -> State | None:
    kind, data = nodes[node]
    if kind == "union":
        for sub in data:
            state = _start_value(rest, sub, ch, nodes)
            if state is not None:
                return state
        return None
    if ch == "{" and kind in ("any", "any_object", "object"):
        target = node if kind != "any" else -1
        return (*rest, ("obj", target, "{", frozenset(), None))
    if ch == "[" and kind in ("any", "array"):
        return (*rest, ("arr", node if kind == "array" else -1, "[", 0))
    if ch == '"' and kind in ("any", "string"):
        text: str | int | None = (
            "" if isinstance(data, frozenset) else 0 if isinstance(data, int) else None
        )
        return (*rest, ("str", node, text, 0))
    if (ch in _DIGITS or ch == "-") and kind in ("any", "number", "integer"):
        num = _num_step("start", ch, kind == "integer")
        return None if num is None else (*rest, ("num", kind == "integer", num))
    words = data if kind == "literal" else ("true", "false", "null") if kind == "any" else ()
    matching = tuple(w for w in words if w.startswith(ch))
    if matching:
        frame = ("lit", matching, ch)
        return _done(rest, nodes) if ch in matching else (*rest, frame)
    return None


def _object_step(stack: State, top: Frame, ch: str, nodes: Sequence[Node]) -> State | None:
    _, node, phase, seen, key = top
    rest = stack[:-1]
    free: tuple[None, frozenset[str]] = (None, frozenset())
    props, required = nodes[node][1] if node >= 0 and nodes[node][0] == "object" else free
    if phase in ("{", "n") and ch == '"':
        if props is not None and not (set(props) - seen):
            return None
        return (*rest, ("obj", node, "k", seen, ""))
    if phase in ("{", ",") and ch == "}":
        if phase == "{" or required <= seen:
            return _done(rest, nodes) if required <= seen else None
        return None
    if phase == "," and ch == ",":
        if props is not None and not (set(props) - seen):
            return None  # every property is set: a comma could never be followed
        return (*rest, ("obj", node, "n", seen, None))
    if phase == ":" and ch == ":":
        value_node = props[key] if props is not None else _any_node(nodes)
        return (*rest, ("obj", node, "v", seen | {key}, key), ("val", value_node))
    if phase == "k":
        return _key_step(rest, top, ch, props)
    return None


def _key_step(rest: State, top: Frame, ch: str, props: dict[str, int] | None) -> State | None:
    _, node, _, seen, key = top
    if ch == '"':
        if props is not None and (key not in props or key in seen):
            return None
        if props is None and key in seen:
            return None
        return (*rest, ("obj", node, ":", seen, key))
    if ch == "\\" or ord(ch) < 0x20:
        return None  # keys are plain text: no escapes, no control characters
    typed = key + ch
    if props is not None and not any(p.startswith(typed) and p not in seen for p in props):
        return None
    return (*rest, ("obj", node, "k", seen, typed))


def _any_node(nodes: Sequence[Node]) -> int:
    # The compiled list always holds an "any" node for free values: the root's helper at the end.
    return len(nodes) - 1


def _array_step(stack: State, top: Frame, ch: str, nodes: Sequence[Node]) -> State | None:
    _, node, phase, count = top
    rest = stack[:-1]
    items, lo, hi = nodes[node][1] if node >= 0 else (_any_node(nodes), 0, None)
    if ch == "]" and phase in ("[", ","):
        return _done(rest, nodes) if count >= lo else None
    if phase == "," and ch == ",":
        return None if hi is not None and count >= hi else (*rest, ("arr", node, "n", count))
    if phase in ("[", "n"):
        if hi is not None and count >= hi:
            return None
        return _start_value((*rest, ("arr", node, "v", count)), items, ch, nodes)
    return None


def _string_step(stack: State, top: Frame, ch: str, nodes: Sequence[Node]) -> State | None:
    _, node, text, esc = top
    rest = stack[:-1]
    if esc == 1:
        if ch not in _ESCAPES and ch != "u":
            return None
        return (*rest, ("str", node, text, 2 if ch == "u" else 0))
    if esc >= 2:
        if ch not in _HEX:
            return None
        return (*rest, ("str", node, text, 0 if esc == 5 else esc + 1))
    if ch == '"':
        if isinstance(text, str) and text not in nodes[node][1]:
            return None
        return _done(rest, nodes)
    if ord(ch) < 0x20:
        return None
    if text is None:
        return (*rest, ("str", node, None, 1)) if ch == "\\" else stack
    if isinstance(text, int):  # a free string under maxLength: an escape counts as one char
        if text >= nodes[node][1]:
            return None
        return (*rest, ("str", node, text + 1, 1 if ch == "\\" else 0))
    if ch == "\\":
        return None  # enum values are matched as typed: no escapes
    typed = text + ch
    if not any(v.startswith(typed) for v in nodes[node][1]):
        return None
    return (*rest, ("str", node, typed, 0))


def _step(stack: State, ch: str, nodes: Sequence[Node]) -> State | None:
    if not stack:
        return None  # the document is complete: nothing may follow
    top = stack[-1]
    kind = top[0]
    if kind == "val":
        return _start_value(stack[:-1], top[1], ch, nodes)
    if kind == "str":
        return _string_step(stack, top, ch, nodes)
    if kind == "num":
        nxt = _num_step(top[2], ch, top[1])
        if nxt is not None:
            return (*stack[:-1], ("num", top[1], nxt))
        if top[2] not in _NUM_DONE:
            return None
        parent = _done(stack[:-1], nodes)  # the number ended: the char belongs to the parent
        return None if parent is None else _step(parent, ch, nodes)
    if kind == "lit":
        typed = top[2] + ch
        matching = tuple(w for w in top[1] if w.startswith(typed))
        if not matching:
            return None
        return (
            _done(stack[:-1], nodes)
            if typed in matching
            else (*stack[:-1], ("lit", matching, typed))
        )
    if kind == "obj":
        if top[2] == "v":
            return None  # a value frame sits above while the value is typed
        return _object_step(stack, top, ch, nodes)
    if kind == "arr":
        return _array_step(stack, top, ch, nodes)
    return None


def feed(state: State, text: str, nodes: Sequence[Node]) -> State | None:
    """The state after ``text``, or None if no valid document starts with what was fed."""
    for ch in text:
        next_state = _step(state, ch, nodes)
        if next_state is None:
            return None
        state = next_state
    return state


def accepting(state: State) -> bool:
    """Whether the text fed so far is a complete document (a trailing number counts)."""
    return not state or (len(state) == 1 and state[0][0] == "num" and state[0][2] in _NUM_DONE)


class TokenVocabulary:
    """Each token id's text, for trying tokens against a constraint (special tokens left out)."""

    def __init__(self, tokenizer: Any, eos_ids: frozenset[int]) -> None:
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        self.eos_ids = eos_ids
        self.texts: list[tuple[int, str]] = []
        for token_id in range(len(tokenizer)):
            if token_id in special:
                continue
            text = tokenizer.decode([token_id], clean_up_tokenization_spaces=False)
            if text and "\ufffd" not in text:
                self.texts.append((token_id, text))
        self.text_of = dict(self.texts)
        self.by_first: dict[str, list[tuple[int, str]]] = {}
        for token_id, text in self.texts:
            self.by_first.setdefault(text[0], []).append((token_id, text))


class JsonConstraint:
    """The per-request state of JSON-constrained decoding.

    Args:
        schema: the JSON schema the output must satisfy (``{}`` for any JSON value; use
            ``{"type": "object"}`` for OpenAI's ``json_object``).
        vocab: the model's token texts.
    """

    def __init__(self, schema: dict[str, Any], vocab: TokenVocabulary) -> None:
        self.nodes = compile_schema(schema)
        self.nodes.append(("any", None))  # the helper node for free values (see _any_node)
        self.vocab = vocab
        self.state: State = (("val", 0),)
        self._memo: dict[State, list[int]] = {}

    def allowed(self) -> list[int]:
        """Token ids that keep the output valid; EOS only once the document is complete."""
        hit = self._memo.get(self.state)
        if hit is not None:
            return hit
        ids = sorted(self.vocab.eos_ids) if accepting(self.state) else []
        for first, tokens in self.vocab.by_first.items():
            after_first = _step(self.state, first, self.nodes)
            if after_first is None:
                continue
            ids.extend(
                tid for tid, text in tokens if feed(after_first, text[1:], self.nodes) is not None
            )
        if len(self._memo) < 50_000:
            self._memo[self.state] = ids
        return ids

    def advance(self, token_id: int, text: str) -> None:
        """Move past a chosen token (its decoded text)."""
        if token_id in self.vocab.eos_ids:
            return
        state = feed(self.state, text, self.nodes)
        if state is None:  # the mask made this impossible; keep going rather than crash
            raise InvalidInputError(f"token {token_id} breaks the JSON constraint")
        self.state = state

    def parse(self, text: str) -> Any:
        """The finished output as JSON (it parses whenever generation ended at EOS)."""
        return json.loads(text)
