"""The bounded Jinja2 sandbox prompts render in: every render is stopped at its limits.

Jinja2's sandbox keeps templates away from Python internals but not from the CPU or memory: two
nested ``range(100000)`` loops, ``'x'|center(10**9)`` or a chain of ``~`` doublings would pin
a thread for minutes or take gigabytes. A thread cannot be killed, so the render checks itself:

* every loop iteration, call, filter, intercepted operator and joined buffer is a *step*; a
  render stops (raises) past :data:`MAX_STEPS` steps or :data:`MAX_RENDER_S` seconds, checked
  at every step, so no step runs long after the limit (each step's own size is bounded below);
* operations that build strings or sequences (padding, ``replace``, ``join``, ``~``, ``+``,
  ``*``, ``%`` and ``format`` widths, ``indent``, ``batch``...) have their result's size
  checked *before* it is built, against :data:`MAX_VALUE_CHARS`;
* everything those operations build is added up, and a render stops past
  :data:`MAX_BUILT_CHARS` (memory held by many ``set`` variables is bounded too);
* calls (macros, ``caller``, recursive loops) nest at most :data:`MAX_CALL_DEPTH` deep.

The hooks are Jinja2's own sandbox extension points (``call``, ``call_binop``, ``concat``,
``finalize``, the filters table) plus one tree rewrite before compiling: loops iterate through
the ``_aifab_steps`` filter and ``~`` becomes the ``_aifab_concat`` filter.
"""

from __future__ import annotations

import contextvars
import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_BUILT_CHARS",
    "MAX_CALL_DEPTH",
    "MAX_RENDER_S",
    "MAX_STEPS",
    "MAX_VALUE_CHARS",
    "RenderLimitError",
    "bounded",
    "compile_template",
    "environment",
]

#: Most loop iterations, calls, filters and joins one render may run (a few-shot prompt of
#: 1,000 examples takes about 5,000; this many take ~50 ms).
MAX_STEPS = 100_000
#: Longest one render may take (wall clock), checked at every step; ordinary prompts take
#: well under a millisecond.
MAX_RENDER_S = 0.5
#: Largest string or sequence one operation may build (the rendered output's limit too).
MAX_VALUE_CHARS = 1_000_000
#: Most characters (or items) all operations of one render may build together.
MAX_BUILT_CHARS = 20_000_000
#: Deepest nesting of calls (macros calling macros, recursive loops).
MAX_CALL_DEPTH = 64
#: Largest exponent, repeated sequence and integer (bits) a template may compute.
MAX_POWER = 1024
MAX_REPEAT_CHARS = 100_000
MAX_INT_BITS = 65_536

_PRINTF_WIDTHS = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?")
_FORMAT_SPEC_NUMBER = re.compile(r"\{[^{}]*?:[^{}]*?(\d{5,})")
#: ``{:>{width}}``: a width taken from an argument, which no size check could see.
_FORMAT_NESTED = re.compile(r"\{[^{}]*:[^{}]*\{")


class RenderLimitError(Exception):
    """A render stopped at one of its limits (steps, time, size, depth)."""


@dataclass
class _Budget:
    steps: int
    deadline: float
    built: int = 0
    depth: int = 0


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar(
    "aifab_render_budget", default=None
)


@contextmanager
def bounded(max_steps: int = MAX_STEPS, max_seconds: float = MAX_RENDER_S) -> Iterator[None]:
    """Run the renders inside under one budget of steps and seconds."""
    token = _BUDGET.set(_Budget(max_steps, time.monotonic() + max_seconds))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def _tick() -> _Budget | None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.steps -= 1
        if budget.steps < 0:
            raise RenderLimitError(f"stopped after {MAX_STEPS} steps (loops, calls and filters)")
        if time.monotonic() > budget.deadline:
            raise RenderLimitError(f"stopped at the render time limit ({MAX_RENDER_S:g} s)")
    return budget


def _built(value: Any) -> Any:
    """Count what an operation built against the render's total; returns ``value``."""
    budget = _BUDGET.get()
    if budget is not None and isinstance(value, str | bytes | list | tuple | dict):
        budget.built += len(value)
        if budget.built > MAX_BUILT_CHARS:
            raise RenderLimitError(f"stopped: the render built over {MAX_BUILT_CHARS} characters")
    return value


def _chars(value: Any, limit: int = MAX_VALUE_CHARS) -> int:
    """About how many characters ``str(value)`` has, counted up to just past ``limit``."""
    kind = type(value)
    if kind is str:  # the common case, first: this runs on the request path
        return len(value)
    if kind is float or kind is bool or value is None:
        return 24
    total, stack = 0, [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str | bytes):
            total += len(item)
        elif isinstance(item, dict):
            total += 2 + 4 * len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            total += 2 + 2 * len(item)
            stack.extend(item)
        elif isinstance(item, int) and not isinstance(item, bool):
            total += item.bit_length() // 3 + 1
        else:
            total += 8
    return total


def _check_size(size: int, what: str) -> None:
    if size > MAX_VALUE_CHARS:
        raise RenderLimitError(f"{what} would build over {MAX_VALUE_CHARS} characters")


def _check_format(fmt: str, args: Any) -> None:
    """``fmt % args`` and ``fmt.format(...)``: no huge widths, no huge arguments."""
    for width, precision in _PRINTF_WIDTHS.findall(fmt):
        for number in (width, precision):
            if number == "*" or (number and int(number) > MAX_VALUE_CHARS // 10):
                raise RenderLimitError(f"format width {number!r} is refused")
    if _FORMAT_SPEC_NUMBER.search(fmt):
        raise RenderLimitError("format widths of 5 digits or more are refused")
    if _FORMAT_NESTED.search(fmt):
        raise RenderLimitError("format widths taken from arguments are refused")
    _check_size(len(fmt) + _chars(args), "formatting")


def _check_int(result_bits: int) -> None:
    if result_bits > MAX_INT_BITS:
        raise RenderLimitError(f"an integer of over {MAX_INT_BITS} bits")


def _bounded_binop(op: str, left: Any, right: Any) -> Any:
    """``** * + %`` with their results' sizes checked before they are computed."""
    _tick()
    if op == "**" and isinstance(right, int | float):
        if abs(right) > MAX_POWER:
            raise RenderLimitError(f"exponent {right} is over {MAX_POWER}")
        if isinstance(left, int) and isinstance(right, int) and right > 0:
            _check_int(left.bit_length() * right)
    elif op == "*":
        seq, times = (left, right) if isinstance(right, int) else (right, left)
        if isinstance(seq, str | list | tuple) and isinstance(times, int):
            if len(seq) * times > MAX_REPEAT_CHARS:
                raise RenderLimitError(f"repeating a sequence to over {MAX_REPEAT_CHARS} items")
            _check_size(_chars(seq) * max(times, 0), "repeating a sequence")
        elif isinstance(left, int) and isinstance(right, int):
            _check_int(left.bit_length() + right.bit_length())
    elif op == "+" and isinstance(left, str | list | tuple):
        _check_size(_chars(left) + _chars(right), "'+'")
    elif op == "%" and isinstance(left, str):
        _check_format(left, right)
    table: dict[str, Callable[[Any, Any], Any]] = {
        "**": lambda a, b: a**b,
        "*": lambda a, b: a * b,
        "+": lambda a, b: a + b,
        "%": lambda a, b: a % b,
    }
    return _built(table[op](left, right))


def _check_str_method(name: str, text: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Size checks for the ``str`` methods that can build more than they are given."""
    if name in ("center", "ljust", "rjust", "zfill") and args and isinstance(args[0], int):
        _check_size(args[0], f"str.{name}")
    elif name == "expandtabs":
        tab = args[0] if args and isinstance(args[0], int) else kwargs.get("tabsize", 8)
        _check_size(len(text) + text.count("\t") * max(int(tab), 0), "str.expandtabs")
    elif name == "replace" and len(args) >= 2:
        _check_replace(text, args[0], args[1])
    elif name == "join" and args:
        _check_size(_chars(args[0]) + _chars(args[0]) * len(text), "str.join")
    elif name in ("format", "format_map"):
        _check_format(text, (args, kwargs))
    elif name in ("translate", "maketrans"):
        raise RenderLimitError(f"str.{name} is not available in templates")


def _check_replace(text: Any, old: Any, new: Any) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        count = text.count(old) if old else len(text) + 1
        _check_size(len(text) + count * (len(new) - len(old)), "replace")


def _steps(iterable: Iterable[Any]) -> Iterator[Any]:
    """A loop's items, one step each."""
    for item in iterable:
        _tick()
        yield item


def _concat(parts: Iterable[Any]) -> str:
    """``a ~ b ~ c`` with the result's size checked before it is built."""
    _tick()
    items = list(parts)
    _check_size(sum(_chars(p) for p in items), "'~'")
    return str(_built("".join(str(p) for p in items)))


def _filter_checks(name: str, value: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Size checks of the filters that can build more than they are given.

    Returns ``value``, materialized when it was an iterator that had to be read to be measured.
    """
    if name == "center":
        width = args[0] if args else kwargs.get("width", 80)
        _check_size(width if isinstance(width, int) else 0, "center")
    elif name == "indent":
        width = args[0] if args else kwargs.get("width", 4)
        pad = len(width) if isinstance(width, str) else int(width)
        _check_size(len(str(value)) + (str(value).count("\n") + 1) * pad, "indent")
    elif name == "replace":
        old, new = (*args, None, None)[:2] if args else (kwargs.get("old"), kwargs.get("new"))
        _check_replace(value, kwargs.get("old", old), kwargs.get("new", new))
    elif name == "tojson":
        indent = args[0] if args else kwargs.get("indent")
        if isinstance(indent, int) and indent > 16:
            raise RenderLimitError("tojson: indent at most 16")
    elif name == "join":
        value = list(value) if not isinstance(value, str | list | tuple) else value
        sep = args[0] if args else kwargs.get("d", "")
        _check_size(_chars(value) + len(value) * _chars(sep), "join")
    elif name == "format" and isinstance(value, str):
        _check_format(value, (args, kwargs))
    elif name in ("batch", "slice"):
        count = args[0] if args else kwargs.get("linecount", kwargs.get("slices", 0))
        if isinstance(count, int) and count > MAX_REPEAT_CHARS:
            raise RenderLimitError(f"{name} of over {MAX_REPEAT_CHARS}")
    elif name == "sum":
        start = args[1] if len(args) > 1 else kwargs.get("start", 0)
        if not isinstance(start, int | float):
            raise RenderLimitError("sum: only numbers may be summed (use join for text)")
    elif name == "wordwrap" and len(args) >= 3 and isinstance(args[2], str):
        lines = len(str(value)) + 1
        _check_size(len(str(value)) + lines * len(args[2]), "wordwrap")
    if name not in ("length", "count", "first", "last", "default", "d"):
        _check_size(_chars(value), f"|{name} of a value")
    return value


def _guard_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a step, size checks before it runs, and its result counted."""
    passes_arg = getattr(fn, "jinja_pass_arg", None) is not None

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _tick()
        head, rest = (args[:1], args[1:]) if passes_arg else ((), args)
        if rest:
            value = _filter_checks(name, rest[0], rest[1:], kwargs)
            rest = (value, *rest[1:])
        return _built(fn(*head, *rest, **kwargs))

    return guarded


def _finalize(value: Any) -> Any:
    """Each ``{{ ... }}`` value: one whose text would be too long is refused before ``str``."""
    if type(value) is not str:
        _check_size(_chars(value), "an output value")
    return value


def _instrument(tree: Any) -> Any:
    """Loops iterate through ``_aifab_steps``; ``~`` becomes ``_aifab_concat``."""
    from jinja2 import nodes
    from jinja2.visitor import NodeTransformer

    class Instrument(NodeTransformer):
        def visit_For(self, node: nodes.For) -> nodes.Node:
            self.generic_visit(node)
            node.iter = nodes.Filter(node.iter, "_aifab_steps", [], [], None, None)
            node.iter.set_lineno(node.lineno)
            return node

        def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
            self.generic_visit(node)
            joined = nodes.Filter(nodes.List(node.nodes), "_aifab_concat", [], [], None, None)
            return joined.set_lineno(node.lineno)

    return Instrument().visit(tree)


@functools.lru_cache(maxsize=1)
def environment() -> Any:
    """The bounded sandbox (one per process; it keeps no per-render state)."""
    from jinja2 import StrictUndefined
    from jinja2.defaults import DEFAULT_FILTERS
    from jinja2.runtime import LoopContext
    from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"**", "*", "+", "%"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            return _bounded_binop(operator, left, right)

        def concat(self, parts: Iterable[str]) -> str:
            _tick()
            items = list(parts)
            _check_size(sum(len(p) for p in items), "a block")
            return str(_built("".join(items)))

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            budget = _tick()
            if not __self.is_safe_callable(__obj):
                raise SecurityError(f"{__obj!r} is not safely callable")
            # The sandbox hands out ``str.format`` wrapped (``__wrapped__``): see through it.
            method = getattr(__obj, "__wrapped__", __obj)
            owner = getattr(method, "__self__", None)
            if isinstance(owner, str):
                _check_str_method(getattr(method, "__name__", ""), owner, args, kwargs)
            elif isinstance(__obj, LoopContext) and args:
                args = (_steps(args[0]), *args[1:])  # a recursive loop's next level
            elif getattr(__obj, "__name__", "") == "generate_lorem_ipsum" and any(
                isinstance(a, int) and a > 1000 for a in (*args, *kwargs.values())
            ):
                raise RenderLimitError("lipsum: at most 1000 paragraphs or words")
            if budget is None:
                return _built(__context.call(__obj, *args, **kwargs))
            if budget.depth >= MAX_CALL_DEPTH:
                raise RenderLimitError(f"calls nested over {MAX_CALL_DEPTH} deep (recursion?)")
            budget.depth += 1
            try:
                return _built(__context.call(__obj, *args, **kwargs))
            finally:
                budget.depth -= 1

    env = BoundedEnvironment(
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        finalize=_finalize,
        # No constant folding: it would run filters at compile time, outside any budget.
        optimized=False,
    )
    env.filters = {name: _guard_filter(name, fn) for name, fn in DEFAULT_FILTERS.items()}
    env.filters["_aifab_steps"] = _steps
    env.filters["_aifab_concat"] = _concat
    return env


@functools.lru_cache(maxsize=128)
def compile_template(source: str) -> Any:
    """The bounded, compiled form of ``source`` (cached: prompts render far more than change).

    Raises:
        jinja2.TemplateSyntaxError: the source does not parse.
    """
    env = environment()
    return env.from_string(_instrument(env.parse(source)))
