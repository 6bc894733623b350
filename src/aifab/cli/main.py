"""The ``aifab`` command: a typer app whose groups live one per module.

Errors users can act on print one line and exit non-zero; tracebacks only with ``--debug``.
Heavy libraries are imported inside commands, so ``aifab --help`` stays fast.
"""

from __future__ import annotations

import os
import sys

import typer

from aifab.cli import (
    agents,
    audit,
    cost,
    data,
    deploy,
    jobs,
    kb,
    keys,
    models,
    monitor,
    ops,
    pipeline,
    policy,
    prompts,
    queue,
    runs,
    schedule,
    serve,
    train,
    workspace,
)
from aifab.cli.output import error_line

app = typer.Typer(
    name="aifab",
    help="aifab: the AI training platform, from raw data to served, watched models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
    wide: bool = typer.Option(
        False, "--wide", help="Show every table cell in full, however wide the table gets."
    ),
) -> None:
    if debug:
        os.environ["AIFAB_DEBUG"] = "1"
    if wide:
        os.environ["AIFAB_WIDE"] = "1"


workspace.register(app)
pipeline.register(app)
train.register(app)
jobs.register(app)
queue.register(app)
runs.register(app)
models.register(app)
deploy.register(app)
keys.register(app)
serve.register(app)
agents.register(app)
app.add_typer(data.app, name="data")
app.add_typer(audit.app, name="audit")
cost.register(app)
app.add_typer(prompts.app, name="prompts")
app.add_typer(kb.app, name="kb")
monitor.register(app)
schedule.register(app)
policy.register(app)
ops.register(app)


def main() -> None:
    """Entry point: run the app and turn known errors into one line and an exit code."""
    debug = "--debug" in sys.argv or os.environ.get("AIFAB_DEBUG") == "1"
    try:
        app()
    except KeyboardInterrupt:
        error_line("interrupted")
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the last line of defence for users
        if debug:
            raise
        # Imported only here: aifab.core's package face pulls sqlalchemy and pydantic-settings,
        # which would double the start time of `aifab --help`.
        from aifab.core.errors import AifabError

        if isinstance(exc, AifabError):
            error_line(exc.message)
            sys.exit(exc.exit_code)
        error_line(f"{type(exc).__name__}: {exc} (run with --debug for the traceback)")
        sys.exit(1)
