"""``aifab train RECIPE``: validate a recipe config, then run it as a job.

The config is checked before anything is queued (unknown keys, wrong types, missing datasets or
columns, a one-class label, a base model that is not a model), so mistakes fail in a second, not
after the job started.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import typer

from aifab.cli.jobs import report_final, wait_for_job, wait_with_local_worker
from aifab.cli.output import JSON_HELP, print_json


def train_command(
    recipe: str = typer.Argument(
        ..., help="Recipe: classify, contrastive, lm, lora, kge or custom."
    ),
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
    sweep: Path | None = typer.Option(
        None, "--sweep", help="Sweep YAML: search hyper-parameters with Optuna, a job per trial."
    ),
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
    job_fields = {"queue": queue, "priority": priority, "executor": executor}
    if sweep is not None:
        template = {**job_fields, "replicas": replicas, "name": name or recipe}
        if resources:
            template["resources"] = resources
        _sweep(recipe, config, overrides or [], sweep, template, local_worker, as_json)
        return
    spec = build_job_spec(
        recipe,
        config,
        overrides or [],
        name=name,
        replicas=replicas,
        resources=resources or None,
        job=job_fields,
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
        for key in ("run_id", "model_dir", "registered_as", "model_version", "metrics"):
            if key in result:
                sys.stdout.write(f"{key}: {result[key]}\n")
    report_final(final, as_json)


def _sweep(
    recipe: str,
    config: Path | None,
    overrides: list[str],
    sweep: Path,
    template: dict[str, Any],
    local_worker: bool,
    as_json: bool,
) -> None:
    """Run a sweep; with ``local_worker`` this thread runs the trials' worker meanwhile."""
    from aifab.jobs.service import FINAL, get_job, submit
    from aifab.jobs.worker import Worker, WorkerOptions
    from aifab.train.hpo import run_sweep
    from aifab.train.submit import load_recipe_config

    base = load_recipe_config(recipe, config, overrides).model_dump(mode="json", by_alias=True)

    def wait(job_id: str) -> dict[str, Any]:
        while (job := get_job(job_id))["state"] not in FINAL:
            time.sleep(0.25)
        return job

    def on_trial(t: Any) -> None:
        if not as_json:
            sys.stdout.write(f"trial {t.number}: {t.state} {t.value} {t.params}\n")

    outcome: dict[str, Any] = {}
    stop = threading.Event()

    def drive() -> None:
        try:
            outcome["result"] = run_sweep(
                recipe,
                base,
                sweep,
                submit=lambda s: submit(s)["id"],
                wait=wait,
                job_template=template,
                on_trial=on_trial,
            )
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            outcome["error"] = exc
        finally:
            stop.set()

    driver = threading.Thread(target=drive, name="aifab-sweep", daemon=True)
    driver.start()
    if local_worker:
        # Trials' replicas die with the thread that started them: the main thread runs them.
        Worker(WorkerOptions(executor=template["executor"], poll_s=0.05)).run(stop)
    driver.join()
    if "error" in outcome:
        raise outcome["error"]
    result = outcome["result"]
    if as_json:
        print_json(result.to_dict())
    else:
        sys.stdout.write(
            f"best trial {result.best_trial}: {result.metric} = {result.best_value} "
            f"with {result.best_params} (job {result.best_job_id})\n"
        )
    if result.best_trial is None:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``train`` to the root app."""
    app.command("train")(train_command)
