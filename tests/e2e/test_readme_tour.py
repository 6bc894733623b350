"""The README's tour runs as written: every shell block, top to bottom, on a fresh workspace.

The README is this test's input, so a changed README is tested by the next run. The workspace
starts as `make demo` leaves it (``aifab demo``), in a fresh directory holding copies of the
checkout's ``examples/``, ``docs/`` and README (what a reader of a fresh clone has). Commands that
cannot run here, or take minutes, are skipped with the reason printed; commands the README
shows failing on purpose must fail. An ``aifab agents run`` must answer with a number of its
SQL result (read from the run's trace).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from tests.e2e.readme_tour import Command, Outcome, Tour, parse_readme

# The whole tour is one test: its commands build on each other, as they do for a reader.
pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

#: Commands the tour does not run, by their text's start, with the reason shown in the report.
SKIP: dict[str, str] = {
    "make demo": "the tour's setup already ran `aifab demo` (what `make demo` runs)",
    "make test": "this test is part of `make test`",
    ". .venv/bin/activate": "the tour runs with the venv's bin first on PATH",
    ".venv/bin/python bench/": "benchmarks take minutes each and are not tests",
}

#: Commands the README shows failing on purpose: they must exit non-zero.
EXPECTED_FAILURES: dict[str, str] = {
    "aifab --debug data show nope": "shows an error with --debug's traceback",
    "aifab prompts render docs-answer --set question=x": "shows the missing-variable error",
    "aifab deployments promote churn": "shows a worse canary refused without --force",
}


def _match(table: dict[str, str], command: Command) -> str:
    return next((why for start, why in table.items() if command.code.startswith(start)), "")


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> Tour:
    if shutil.which("jq") is None:
        pytest.skip("the README's commands use jq: apt-get install jq (make system-tools)")
    cwd = tmp_path_factory.mktemp("readme-tour")
    for folder in ("examples", "docs"):
        shutil.copytree(ROOT / folder, cwd / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(README, cwd / "README.md")
    bindir = str(Path(sys.executable).parent)
    env = {
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
        "AIFAB_HOME": str(cwd / ".aifab"),
        "AIFAB_ACTOR": "user:tour",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT / "src"),
    }
    tour = Tour(cwd=cwd, env=env)
    demo = tour.run(Command("aifab demo", 0, "setup"))
    assert demo.returncode == 0, demo.output[-3000:]
    yield tour
    tour.close()


def test_readme_tour_runs_as_written(tour: Tour) -> None:
    outcomes: list[Outcome] = []
    for command in parse_readme(README):
        reason = _match(SKIP, command)
        if reason:
            outcomes.append(Outcome(command, 0, "", 0.0, skipped=reason))
            continue
        outcome = tour.run(command)
        if _is_agent_run(command) and not _failed(outcome):
            outcome = _check_agent_answer(tour, outcome)
        outcomes.append(outcome)
        state = "ok" if not _failed(outcome) else f"FAILED (exit {outcome.returncode})"
        print(f"README line {command.line}: {state} in {outcome.seconds:.1f} s: {command.text}")
    _report(outcomes, tour)
    broken = [o for o in outcomes if not o.skipped and _failed(o)]
    detail = "\n\n".join(
        f"README line {o.command.line} ({o.command.section}): {o.command.text}\n"
        f"exit {o.returncode}; last output:\n{o.output[-1500:]}"
        for o in broken
    )
    ran = sum(1 for o in outcomes if not o.skipped)
    assert not broken, f"{len(broken)} of {ran} README commands do not work as written:\n{detail}"


def _is_agent_run(command: Command) -> bool:
    return "aifab agents run " in command.code


def _check_agent_answer(tour: Tour, outcome: Outcome) -> Outcome:
    """An agent's answer must hold its SQL result's number (issue 35): not just any words.

    The run's trace (the newest run) gives the answer and the ``sql`` steps' rows; an answer
    without one of the rows' numbers turns the command's outcome into a failure.
    """
    look = Command(
        "aifab agents trace $(aifab agents runs --json | jq -r '.[0].id') --json",
        outcome.command.line,
        outcome.command.section,
    )
    traced = tour.run(look)
    why = ""
    try:
        trace = json.loads(traced.output[traced.output.index("{") :])
        rows = [
            row
            for step in trace["trace"]
            if step["kind"] == "tool" and step["name"] == "sql" and not step.get("error")
            for row in (step.get("output") or {}).get("rows", [])
        ]
        numbers = {str(v) for row in rows for v in row.values() if isinstance(v, int | float)} - {
            "True",
            "False",
        }
        answer = str(trace.get("answer") or "")
        if not numbers:
            why = f"the run has no numeric SQL result to check: {trace['trace']!r:.600}"
        elif not any(n in answer for n in numbers):
            why = f"the answer {answer!r} holds none of the SQL result's numbers {sorted(numbers)}"
    except (ValueError, KeyError, TypeError) as exc:
        why = f"cannot read the run's trace ({exc!r}): {traced.output[-800:]}"
    if not why:
        return outcome
    return Outcome(outcome.command, 1, outcome.output + "\n" + why, outcome.seconds)


def _failed(outcome: Outcome) -> bool:
    expected_failure = bool(_match(EXPECTED_FAILURES, outcome.command))
    return (outcome.returncode != 0) != expected_failure


def _report(outcomes: list[Outcome], tour: Tour) -> None:
    """Print every skip with its reason, and keep a JSON report beside the test artifacts."""
    for o in outcomes:
        if o.skipped:
            print(f"skipped README line {o.command.line}: {o.command.text!r}: {o.skipped}")
    out = ROOT / ".artifacts"
    out.mkdir(exist_ok=True)
    rows = [
        {
            "line": o.command.line,
            "section": o.command.section,
            "command": o.command.text,
            "returncode": o.returncode,
            "seconds": round(o.seconds, 2),
            "skipped": o.skipped,
            "ok": bool(o.skipped) or not _failed(o),
            "output_tail": o.output[-800:],
        }
        for o in outcomes
    ]
    (out / "readme-tour.json").write_text(
        json.dumps({"ports": tour.ports, "commands": rows}, indent=1)
    )
