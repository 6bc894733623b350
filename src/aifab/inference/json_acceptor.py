"""The character-level pushdown acceptor of constrained decoding, and what closing costs.

Its state is an immutable tuple of frames, so each candidate token is tried on the same state
without copying and states can key memo tables. Output is compact JSON: whitespace is allowed
only inside strings, so a model cannot stall in an endless run of spaces.
:func:`closing_cost` is the fewest characters that complete a document from a state; decoding
never picks a token after which that exceeds the tokens left, so the output closes in time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aifab.inference.json_schema import MAX_DIGITS, Node, number_extension

__all__ = ["Frame", "State", "accepting", "closing_cost", "feed", "step"]

_DIGITS = "0123456789"
_HEX = "0123456789abcdefABCDEF"
_ESCAPES = '"\\/bfnrt'

# Frames (immutable tuples), the stack's top last:
#   ("val", node)                      a value of node expected next
#   ("obj", node, phase, seen, key)    phase: "{" (after the brace), "k" (in a key), ":" (key
#                                      done), "v" (a value above), "," (after a value), "n"
#                                      (after a comma)
#   ("arr", node, phase, count)        phase: "[", "v", ",", "n"
#   ("str", node, text, esc)           text typed so far (enums), its length (counted) or None
#                                      (free); esc: 0, 1 after a backslash, 2-5 in \uXXXX
#   ("num", node, state, text)
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
_MAX_EXP_DIGITS = 3


def _num_kind(nodes: Sequence[Node], node: int) -> tuple[bool, Any]:
    kind, data = nodes[node]
    return kind == "integer", data if kind in ("number", "integer") else None


def _num_step(state: str, text: str, ch: str, integer: bool, bounds: Any) -> str | None:
    nxt: str | None = None
    if ch in _DIGITS:
        if state in ("start", "sign") and ch != "0" or state == "int":
            nxt = "int"
        elif state in ("dot", "frac"):
            nxt = "frac"
        elif state in ("e", "esign", "exp"):
            nxt = "exp"
    if nxt is None:
        nxt = _NUM_NEXT.get((state, ch))
        if nxt is None or (integer or bounds is not None) and nxt == "e":
            return None
        if integer and nxt == "dot":
            return None
    new = text + ch
    if nxt == "exp":
        if len(new.lower().rsplit("e", 1)[1].lstrip("+-")) > _MAX_EXP_DIGITS:
            return None
    elif nxt in ("int", "frac") and len(new.lstrip("-").rsplit(".", 1)[-1]) > MAX_DIGITS:
        return None  # too many digits in the integer part, or in the fraction
    if bounds is not None and number_extension(new, bounds, integer) is None:
        return None
    return nxt


def _done(stack: State, nodes: Sequence[Node], value: str | None = None) -> State | None:
    """A value just ended on top of ``stack`` (already popped): advance the parent."""
    if not stack:
        return stack
    top = stack[-1]
    if top[0] == "obj":
        node = top[1]
        if node >= 0 and nodes[node][0] == "tagged":  # the tag's value picks the branch
            node = nodes[node][1][2][value]
        return (*stack[:-1], ("obj", node, ",", top[3], None))
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
    if ch == "{" and kind in ("any", "any_object", "object", "tagged"):
        target = node if kind != "any" else -1
        return (*rest, ("obj", target, "{", frozenset(), None))
    if ch == "[" and kind in ("any", "array"):
        return (*rest, ("arr", node if kind == "array" else -1, "[", 0))
    if ch == '"' and kind in ("any", "string"):
        text = "" if isinstance(data, frozenset) else 0 if isinstance(data, tuple) else None
        return (*rest, ("str", node, text, 0))
    if (ch in _DIGITS or ch == "-") and kind in ("any", "number", "integer"):
        num = _num_step("start", "", ch, *_num_kind(nodes, node))
        return None if num is None else (*rest, ("num", node, num, ch))
    words = data if kind == "literal" else ("true", "false", "null") if kind == "any" else ()
    matching = tuple(w for w in words if w.startswith(ch))
    if matching:
        return _done(rest, nodes) if ch in matching else (*rest, ("lit", matching, ch))
    return None


def _props(nodes: Sequence[Node], node: int) -> tuple[dict[str, int] | None, frozenset[str]]:
    if node < 0 or nodes[node][0] == "any_object":
        return None, frozenset()
    kind, data = nodes[node]
    if kind == "tagged":  # before the branch is known, only the tag may come
        return {data[0]: data[1]}, frozenset({data[0]})
    return data


def _object_step(stack: State, top: Frame, ch: str, nodes: Sequence[Node]) -> State | None:
    _, node, phase, seen, key = top
    rest = stack[:-1]
    props, required = _props(nodes, node)
    if phase in ("{", "n") and ch == '"':
        if props is not None and not (set(props) - seen):
            return None
        return (*rest, ("obj", node, "k", seen, ""))
    if phase in ("{", ",") and ch == "}":
        return _done(rest, nodes) if required <= seen else None
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
        if key in seen or (props is not None and key not in props):
            return None
        return (*rest, ("obj", node, ":", seen, key))
    if ch == "\\" or ord(ch) < 0x20:
        return None  # keys are plain text: no escapes, no control characters
    typed = key + ch
    if props is not None and not any(p.startswith(typed) and p not in seen for p in props):
        return None
    return (*rest, ("obj", node, "k", seen, typed))


def _any_node(nodes: Sequence[Node]) -> int:
    # The constraint appends an "any" node for free values at the end of the compiled list.
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
    data = nodes[node][1]
    if esc == 1:
        if ch not in _ESCAPES and ch != "u":
            return None
        return (*rest, ("str", node, text, 2 if ch == "u" else 0))
    if esc >= 2:
        if ch not in _HEX:
            return None
        return (*rest, ("str", node, text, 0 if esc == 5 else esc + 1))
    if ch == '"':
        if isinstance(text, str):
            return _done(rest, nodes, text) if text in data else None
        if isinstance(text, int) and text < data[0]:
            return None  # minLength not reached
        return _done(rest, nodes)
    if ord(ch) < 0x20:
        return None
    if text is None:
        return (*rest, ("str", node, None, 1)) if ch == "\\" else stack
    if isinstance(text, int):  # a counted string: an escape counts as one character
        if data[1] is not None and text >= data[1]:
            return None
        return (*rest, ("str", node, text + 1, 1 if ch == "\\" else 0))
    if ch == "\\":
        return None  # enum values are matched as typed: no escapes
    typed = text + ch
    if not any(v.startswith(typed) for v in data):
        return None
    return (*rest, ("str", node, typed, 0))


def step(stack: State, ch: str, nodes: Sequence[Node]) -> State | None:
    """The state after one character, or None if no valid document continues with it."""
    if not stack:
        return None  # the document is complete: nothing may follow
    top = stack[-1]
    kind = top[0]
    if kind == "val":
        return _start_value(stack[:-1], top[1], ch, nodes)
    if kind == "str":
        return _string_step(stack, top, ch, nodes)
    if kind == "num":
        integer, bounds = _num_kind(nodes, top[1])
        nxt = _num_step(top[2], top[3], ch, integer, bounds)
        if nxt is not None:
            return (*stack[:-1], ("num", top[1], nxt, top[3] + ch))
        if top[2] not in _NUM_DONE or number_extension(top[3], bounds, integer) != 0:
            return None
        parent = _done(stack[:-1], nodes)  # the number ended: the char belongs to the parent
        return None if parent is None else step(parent, ch, nodes)
    if kind == "lit":
        typed = top[2] + ch
        matching = tuple(w for w in top[1] if w.startswith(typed))
        if not matching:
            return None
        if typed in matching:
            return _done(stack[:-1], nodes)
        return (*stack[:-1], ("lit", matching, typed))
    if kind == "obj":
        return None if top[2] == "v" else _object_step(stack, top, ch, nodes)
    if kind == "arr":
        return None if top[2] == "v" else _array_step(stack, top, ch, nodes)
    return None


def feed(state: State, text: str, nodes: Sequence[Node]) -> State | None:
    """The state after ``text``, or None if no valid document starts with what was fed."""
    for ch in text:
        next_state = step(state, ch, nodes)
        if next_state is None:
            return None
        state = next_state
    return state


def accepting(state: State, nodes: Sequence[Node] | None = None) -> bool:
    """Whether the text fed so far is a complete document (a trailing number counts)."""
    if not state:
        return True
    if len(state) != 1 or state[0][0] != "num" or state[0][2] not in _NUM_DONE:
        return False
    if nodes is None:
        return True
    return number_extension(state[0][3], *reversed(_num_kind(nodes, state[0][1]))) == 0


def _entry(p: str, props: dict[str, int], sizes: Sequence[int]) -> int:
    return len(p) + 3 + sizes[props[p]]  # "p":value


def _object_rest(
    nodes: Sequence[Node], node: int, seen: frozenset[str], sizes: Sequence[int]
) -> int:
    """Characters to close an object after a value, with ``seen`` properties set."""
    props, required = _props(nodes, node)
    if props is None:
        return 1
    return sum(1 + _entry(p, props, sizes) for p in required - seen) + 1


def _object_cost(top: Frame, nodes: Sequence[Node], sizes: Sequence[int]) -> int:
    _, node, phase, seen, key = top
    if node >= 0 and nodes[node][0] == "tagged":
        tag, _, branches = nodes[node][1]
        after_tag = min(
            2 + len(v) + _object_rest(nodes, b, seen | {tag}, sizes) for v, b in branches.items()
        )
        if phase == "{":
            return len(tag) + 3 + after_tag
        if phase == "k":
            return len(tag) - len(key) + 2 + after_tag
        return 1 + after_tag  # ":"
    props, required = _props(nodes, node)
    if phase in ("v", ","):
        return _object_rest(nodes, node, seen, sizes)
    missing = required - seen
    if props is None:  # any object: the cheapest entry is "":0 (or one more key character)
        if phase == "k":
            return 4 + (key in seen)
        return 1 if phase == "{" else 5 + ("" in seen) if phase == "n" else 2 + 1
    if phase in ("{", "n") and (missing or phase == "n"):
        if not missing:
            return min(_entry(p, props, sizes) for p in set(props) - seen) + 1
        return sum(_entry(p, props, sizes) for p in missing) + len(missing)
    if phase == "{":
        return 1
    if phase == "k":
        return min(
            len(p) - len(key) + 2 + sizes[props[p]] + _object_rest(nodes, node, seen | {p}, sizes)
            for p in props
            if p.startswith(key) and p not in seen
        )
    return 1 + sizes[props[key]] + _object_rest(nodes, node, seen | {key}, sizes)  # ":"


def _array_cost(top: Frame, nodes: Sequence[Node], sizes: Sequence[int]) -> int:
    _, node, phase, count = top
    items, lo, _ = nodes[node][1] if node >= 0 else (_any_node(nodes), 0, None)
    if phase == "v":
        count += 1
    if phase in ("v", ","):
        return max(lo - count, 0) * (1 + sizes[items]) + 1
    need = max(lo - count, 1 if phase == "n" else 0)
    return need * sizes[items] + max(need - 1, 0) + 1


def _string_cost(top: Frame, nodes: Sequence[Node]) -> int:
    _, node, text, esc = top
    pending = 0 if esc == 0 else 1 if esc == 1 else 6 - esc
    if isinstance(text, str):
        return min(len(v) - len(text) for v in nodes[node][1] if v.startswith(text)) + 1
    if isinstance(text, int):
        return pending + max(nodes[node][1][0] - text, 0) + 1
    return pending + 1


def closing_cost(state: State, nodes: Sequence[Node], sizes: Sequence[int]) -> int:
    """The fewest characters that complete a document from ``state``.

    Args:
        state: the acceptor's state.
        nodes: the compiled schema.
        sizes: each node's shortest instance (:func:`~aifab.inference.json_schema.min_lengths`).
    """
    total, i = 0, len(state) - 1
    while i >= 0:
        top = state[i]
        kind = top[0]
        below = state[i - 1] if i > 0 else None
        if (
            below is not None
            and below[0] == "obj"
            and below[1] >= 0
            and nodes[below[1]][0] == "tagged"
        ):  # the tag's value and the branch it picks are costed together
            tag, _, branches = nodes[below[1]][1]
            typed = top[2] if kind == "str" else ""
            total += min(
                len(v)
                - len(typed)
                + (1 if kind == "str" else 2)
                + _object_rest(nodes, b, below[3], sizes)
                for v, b in branches.items()
                if v.startswith(typed)
            )
            i -= 2
            continue
        if kind == "val":
            total += sizes[top[1]]
        elif kind == "str":
            total += _string_cost(top, nodes)
        elif kind == "num":
            integer, bounds = _num_kind(nodes, top[1])
            total += number_extension(top[3], bounds, integer) or 0
        elif kind == "lit":
            total += min(len(w) for w in top[1]) - len(top[2])
        elif kind == "obj":
            total += _object_cost(top, nodes, sizes)
        else:
            total += _array_cost(top, nodes, sizes)
        i -= 1
    return total
