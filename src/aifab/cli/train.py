"""``aifab train RECIPE``: validate a recipe config, then run it as a job.

The config is checked before anything is queued (unknown keys, wrong types, missing datasets or
columns, a one-class label, a base model that is not a model), so mistakes fail in a second, not
after the job started.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from aifab.cli.jobs import report_final, wait_for_job, wait_with_local_worker
from aifab.cli.output import JSON_HELP, print_json


def train_command(
    recipe: str = typer.Argument(..., help="Recipe: classify, lm, lora, kge or custom."),
    overrides: list[str] = typer.Argument(
        None, help="Config overrides as dotted.key=value (values read as YAML)."
    ),
    config: Path | None = typer.Option(None, "-c", "--config", help="Recipe config YAML."),
    replicas: int = typer.Option(1, help="Data-parallel replicas (DDP across processes)."),
    cpu: float | None = typer.Option(None, help="CPU cores per replica."),
    memory: str | None = typer.Option(None, help="Memory per replica, e.g. 4Gi."),
    gpu: int | None = typer.Option(None, help="GPUs per replica."),
    queue: str = typer.Option("default", help="Queue to submit to."),
    priority: int = typer.Option(0, help="Job priority (higher may preempt lower)."),
    executor: str = typer.Option("local", help="local, ray or volcano."),
    name: str | None = typer.Option(None, help="Job name (default: the recipe)."),
    wait: bool = typer.Option(False, "--wait", help="Wait until the run is final."),
    local_worker: bool = typer.Option(
        False, "--local-worker", help="With --wait: run a worker in this process meanwhile."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Train with a recipe: every run is a job, fully recorded in MLflow."""
    from aifab.jobs.service import job_result, submit
    from aifab.train.submit import build_job_spec

    resources = {k: v for k, v in (("cpu", cpu), ("memory", memory), ("gpu", gpu)) if v}
    spec = build_job_spec(
        recipe,
        config,
        overrides or [],
        name=name,
        replicas=replicas,
        resources=resources or None,
        job={"queue": queue, "priority": priority, "executor": executor},
    )
    job = submit(spec)
    if not wait:
        if as_json:
            print_json(job)
        else:
            sys.stdout.write(f"{job['id']}\n")
        return
    if local_worker:
        final = wait_with_local_worker(job["id"], executor)
    else:
        final = wait_for_job(job["id"], job)
    result = job_result(job["id"]) or {}
    if as_json:
        final = {**final, "result": result}
    else:
        for key in ("run_id", "model_dir", "registered", "metrics"):
            if key in result:
                sys.stdout.write(f"{key}: {result[key]}\n")
    report_final(final, as_json)


def register(app: typer.Typer) -> None:
    """Add ``train`` to the root app."""
    app.command("train")(train_command)
