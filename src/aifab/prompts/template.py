"""Sandboxed Jinja2 templates: parse, find the variables they use, render with checked variables.

Pure functions over strings. The sandbox refuses attribute access to Python internals
(``__class__``, ``__globals__`` ...) and unsafe calls, so a stored template cannot run code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from aifab.core.errors import InvalidInputError
from aifab.core.names import is_full_match

__all__ = ["MAX_OUTPUT_CHARS", "MAX_TEMPLATE_CHARS", "check_variables", "render", "used_variables"]

MAX_TEMPLATE_CHARS = 100_000
#: A rendered prompt longer than this is refused (a loop cannot fill memory with it).
MAX_OUTPUT_CHARS = 1_000_000
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


#: Largest exponent and repeated-sequence length a template may compute.
MAX_POWER = 1024
MAX_REPEAT_CHARS = 100_000


def _bounded_binop(op: str, left: Any, right: Any) -> Any:
    """``**`` and ``*`` with bounds, so ``9 ** 9 ** 9`` or ``'x' * 10**10`` cannot stall."""
    from jinja2.sandbox import SecurityError

    if op == "**" and isinstance(right, int | float) and abs(right) > MAX_POWER:
        raise SecurityError(f"exponent {right} is over {MAX_POWER}")
    if op == "*":
        seq, times = (left, right) if isinstance(right, int) else (right, left)
        too_long = isinstance(seq, str | list | tuple) and isinstance(times, int)
        if too_long and len(seq) * times > MAX_REPEAT_CHARS:
            raise SecurityError(f"repeating a sequence to over {MAX_REPEAT_CHARS} items")
    return left**right if op == "**" else left * right


@lru_cache(maxsize=1)
def _env() -> Any:
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Env(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"**", "*"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator in self.intercepted_binops:
                return _bounded_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

    # Immutable: templates may not even call list.append / dict.update on the variables.
    return Env(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)


def _parse(template: str) -> Any:
    from jinja2 import TemplateSyntaxError

    if len(template) > MAX_TEMPLATE_CHARS:
        raise InvalidInputError(
            f"template: {len(template)} characters is over the limit of {MAX_TEMPLATE_CHARS}"
        )
    try:
        return _env().parse(template)
    except TemplateSyntaxError as exc:
        raise InvalidInputError(f"template: line {exc.lineno}: {exc.message}") from None


def used_variables(template: str) -> list[str]:
    """The variables ``template`` reads, sorted.

    Raises:
        InvalidInputError: a syntax error (with its line) or a template over the size limit.
    """
    from jinja2 import meta

    return sorted(meta.find_undeclared_variables(_parse(template)))


def check_variables(template: str, declared: Iterable[str] | None) -> list[str]:
    """The variables to declare for ``template``: ``declared`` checked against use, or inferred.

    Raises:
        InvalidInputError: a bad name, or the template uses a variable not declared (named).
    """
    used = used_variables(template)
    if declared is None:
        return used
    names = sorted(set(declared))
    for name in names:
        if not is_full_match(_NAME, name):
            raise InvalidInputError(f"--var {name!r}: not a valid variable name")
    undeclared = [v for v in used if v not in names]
    if undeclared:
        raise InvalidInputError(
            f"template uses undeclared variable(s) {', '.join(undeclared)} "
            f"(declared: {', '.join(names) or 'none'})"
        )
    return names


def render(template: str, declared: Iterable[str], values: Mapping[str, Any]) -> str:
    """Render ``template`` with exactly the ``declared`` variables.

    Raises:
        InvalidInputError: missing or extra variables (named), a template reaching for Python
            internals or unsafe calls, an undefined attribute, or output over the size limit.
    """
    from jinja2 import TemplateError, UndefinedError
    from jinja2.sandbox import SecurityError

    names = set(declared)
    missing = sorted(names - set(values))
    extra = sorted(set(values) - names)
    if missing:
        raise InvalidInputError(f"missing variable(s): {', '.join(missing)}")
    if extra:
        raise InvalidInputError(
            f"unknown variable(s): {', '.join(extra)} (declared: {', '.join(sorted(names))})"
        )
    try:
        out = _render_bounded(_env().from_string(_parse_source(template)), dict(values))
    except SecurityError as exc:
        raise InvalidInputError(f"template: refused by the sandbox: {exc}") from None
    except UndefinedError as exc:
        raise InvalidInputError(f"template: {exc.message}") from None
    except TemplateError as exc:
        raise InvalidInputError(f"template: {exc}") from None
    except (TypeError, ValueError, ArithmeticError, OverflowError) as exc:
        raise InvalidInputError(f"template: {type(exc).__name__}: {exc}") from None
    if len(out) > MAX_OUTPUT_CHARS:
        raise InvalidInputError(f"rendered prompt is over {MAX_OUTPUT_CHARS} characters")
    return str(out)


def _render_bounded(compiled: Any, values: dict[str, Any]) -> str:
    """Render piece by piece, stopping as soon as the output passes the size limit."""
    parts: list[str] = []
    size = 0
    for piece in compiled.generate(**values):
        size += len(piece)
        if size > MAX_OUTPUT_CHARS:
            raise InvalidInputError(f"rendered prompt is over {MAX_OUTPUT_CHARS} characters")
        parts.append(piece)
    return "".join(parts)


def _parse_source(template: str) -> str:
    _parse(template)  # size and syntax errors before compiling
    return template
