"""Sandboxed Jinja2 templates: parse, find the variables they use, render with checked variables.

Pure functions over strings. The sandbox refuses attribute access to Python internals
(``__class__``, ``__globals__`` ...) and unsafe calls, so a stored template cannot run code, and
every render is bounded in steps, time, size and depth (:mod:`aifab.prompts.sandbox`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from aifab.core.errors import InvalidInputError
from aifab.core.names import is_full_match
from aifab.prompts.sandbox import (
    MAX_VALUE_CHARS,
    RenderLimitError,
    bounded,
    compile_template,
    environment,
)

__all__ = ["MAX_OUTPUT_CHARS", "MAX_TEMPLATE_CHARS", "check_variables", "render", "used_variables"]

MAX_TEMPLATE_CHARS = 100_000
#: A rendered prompt longer than this is refused (a loop cannot fill memory with it).
MAX_OUTPUT_CHARS = MAX_VALUE_CHARS
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def _parse(template: str) -> Any:
    from jinja2 import TemplateSyntaxError

    if len(template) > MAX_TEMPLATE_CHARS:
        raise InvalidInputError(
            f"template: {len(template)} characters is over the limit of {MAX_TEMPLATE_CHARS}"
        )
    try:
        return environment().parse(template)
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
    compiled = _compiled(template)
    try:
        with bounded():
            out = _render_bounded(compiled, dict(values))
    except (SecurityError, RenderLimitError) as exc:
        raise InvalidInputError(f"template: refused by the sandbox: {exc}") from None
    except RecursionError:
        # Python's own stack limit, reached before the call depth limit by deep expressions.
        raise InvalidInputError("template: refused by the sandbox: nested too deeply") from None
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
    # The compiled render function itself: ``generate`` adds a generator layer per piece only
    # to rewrite tracebacks, which are not shown here.
    for piece in compiled.root_render_func(compiled.new_context(values)):
        size += len(piece)
        if size > MAX_OUTPUT_CHARS:
            raise InvalidInputError(f"rendered prompt is over {MAX_OUTPUT_CHARS} characters")
        parts.append(piece)
    return "".join(parts)


def _compiled(template: str) -> Any:
    from jinja2 import TemplateSyntaxError

    if len(template) > MAX_TEMPLATE_CHARS:
        _parse(template)  # the size error, worded once
    try:
        return compile_template(template)
    except TemplateSyntaxError as exc:
        raise InvalidInputError(f"template: line {exc.lineno}: {exc.message}") from None
