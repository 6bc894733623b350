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

With ``--attack SECONDS`` it also starts ``aifab serve``, measures another key's renders of
the QA prompt alone and while seven clients render hostile templates (nested range loops,
exponential macros: issue 19), then sends SIGTERM with the attacks in flight and prints how
long the server took to stop. Goals: the victim's P99 under attack < 100 ms; stop < 5 s.

    python bench/prompt_render.py [--n 2000] [--attack 10]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
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


HOSTILE = {
    "loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "macros": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
    "{{ f(60) }}",
}


def _victim(base: str, key: str, seconds: float) -> list[float]:
    import httpx

    source, values = PROMPTS["qa"]
    out: list[float] = []
    with httpx.Client(base_url=base, timeout=60) as client:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t0 = time.perf_counter()
            r = client.post(
                "/v1/prompts/qa/render",
                json={"variables": values},
                headers={"Authorization": f"Bearer {key}"},
            )
            out.append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text
    return out


def _p(lat: list[float]) -> str:
    q = statistics.quantiles(lat, n=100)
    return f"n={len(lat):<5} P50 {q[49] * 1000:7.1f} ms  P99 {q[98] * 1000:7.1f} ms"


def attack(seconds: float) -> None:
    """Victim latency quiet and under hostile renders, then SIGTERM under attack."""
    import subprocess

    import httpx

    home = Path(tempfile.mkdtemp(prefix="aifab-bench-render-")) / "ws"
    os.environ["AIFAB_HOME"] = str(home)
    from aifab.prompts import create_prompt
    from aifab.serve.keys import create_key

    create_prompt("qa", PROMPTS["qa"][0])
    for name, source in HOSTILE.items():
        create_prompt(name, source)
    victim = create_key("client", name="victim", rate=None, token_quota=None)[1]
    # Seven attacking keys (one key may run two renders at once).
    attackers = [
        create_key("client", name=f"attacker{i}", rate=None, token_quota=None)[1] for i in range(7)
    ]
    port = _free_port()
    entry = "import sys; from aifab.cli.main import main; sys.argv[0] = 'aifab'; main()"
    cmd = [sys.executable, "-c", entry, "serve", "--port", str(port), "--no-worker"]
    proc = subprocess.Popen(cmd, env=os.environ.copy(), stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.2)
    stop = threading.Event()
    answers: dict[str, int] = {}

    def attacker_loop(name: str, attacker: str) -> None:
        while not stop.is_set():
            try:
                r = httpx.post(
                    f"{base}/v1/prompts/{name}/render",
                    json={"variables": {}},
                    headers={"Authorization": f"Bearer {attacker}"},
                    timeout=120,
                )
                key = f"{name} {r.status_code}"
            except httpx.TransportError as exc:
                key = f"{name} {type(exc).__name__}"
            answers[key] = answers.get(key, 0) + 1

    try:
        _victim(base, victim, 1.0)
        quiet = _victim(base, victim, seconds)
        for name, attacker in zip(["loops", "macros"] * 3 + ["loops"], attackers, strict=True):
            threading.Thread(target=attacker_loop, args=(name, attacker), daemon=True).start()
        time.sleep(1.0)
        attacked = _victim(base, victim, seconds)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        stopped = time.monotonic() - started
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
    print("victim key, QA prompt renders back to back:")
    print(f"  quiet         {_p(quiet)}")
    print(f"  under attack  {_p(attacked)}   goal: P99 < 100 ms")
    print(f"SIGTERM with 7 hostile renders in flight: stopped in {stopped:.1f} s   goal: < 5 s")
    print("attackers were answered:", dict(sorted(answers.items())))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="Renders per prompt and way.")
    parser.add_argument("--attack", type=float, default=0, help="Seconds per attack phase.")
    args = parser.parse_args()
    if args.attack:
        os.environ.setdefault("AIFAB_HOME", tempfile.mkdtemp(prefix="aifab-bench-render-"))

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
    if args.attack:
        attack(args.attack)


if __name__ == "__main__":
    main()
