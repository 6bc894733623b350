"""Prompt rendering on the request path: aifab's bounded sandbox vs. plain Jinja2.

Renders three ordinary prompts (a QA prompt, a few-shot prompt with a loop and filters, a
prompt built from a macro) many times each, with:

* ``aifab``: :func:`aifab.prompts.template.render` (variable checks, the bounded sandbox with
  its step, size and time checks, compiled templates cached);
* ``jinja2 cached``: Jinja2's ``ImmutableSandboxedEnvironment`` rendering a compiled template
  (the floor: no limits at all);
* ``jinja2 compile``: the same environment compiling the source on every render (what aifab
  did before its templates were cached).

It prints microseconds per render for each and the ratios. Goal: aifab within 2x the floor.

    python bench/prompt_render.py [--n 2000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

PROMPTS: dict[str, tuple[str, dict[str, Any]]] = {
    "qa": (
        "Answer from the context only.\nContext: {{ context }}\nQuestion: {{ question }}\n",
        {"context": "Churn is the share of customers who leave. " * 20, "question": "What?"},
    ),
    "few-shot": (
        "Classify the ticket.\n{% for ex in examples %}Ticket: {{ ex.text|trim }}\n"
        "Label: {{ ex.label|upper }}\n{% endfor %}Ticket: {{ ticket }}\nLabel:",
        {
            "examples": [{"text": f" ticket number {i} ", "label": "billing"} for i in range(5)],
            "ticket": "my invoice is wrong",
        },
    ),
    "macro": (
        "{% macro row(k, v) %}- {{ k ~ ': ' ~ v }}\n{% endmacro %}Customer:\n"
        "{% for k, v in customer|dictsort %}{{ row(k, v) }}{% endfor %}"
        "Write a {{ '%d'|format(words) }}-word reply.",
        {"customer": {"plan": "pro", "age": 41, "tenure": 18}, "words": 80},
    ),
}


def _time(fn: Callable[[], Any], n: int) -> float:
    fn()  # warm: imports, caches
    started = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="Renders per prompt and way.")
    args = parser.parse_args()

    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from aifab.prompts.template import render

    env = ImmutableSandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True)
    print(f"{'prompt':<10} {'aifab':>9} {'jinja2 cached':>14} {'jinja2 compile':>15}  ratios")
    for name, (source, values) in PROMPTS.items():
        compiled = env.from_string(source)
        assert render(source, list(values), values) == compiled.render(**values), name
        ours = _time(lambda s=source, v=values: render(s, list(v), v), args.n)
        floor = _time(lambda c=compiled, v=values: c.render(**v), args.n)
        every = _time(lambda s=source, v=values: env.from_string(s).render(**v), args.n // 10)
        print(
            f"{name:<10} {ours:7.1f}us {floor:12.1f}us {every:13.1f}us  "
            f"aifab/cached {ours / floor:.2f}x  aifab/compile {ours / every:.2f}x"
        )


if __name__ == "__main__":
    main()
