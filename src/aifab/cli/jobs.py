"""``aifab job`` and ``aifab worker``: submit, watch and control jobs; run the scheduler loop.

``aifab job submit --wait`` needs a worker: a running ``aifab worker`` (it waits a short grace
for one to appear, then exits 1 saying so), or ``--local-worker`` to run one in-process until the
job is final (that worker also runs other pending jobs meanwhile and re-queues them on exit).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from aifab.cli.output import JSON_HELP, emit, print_json, print_table, when

job_app = typer.Typer(help="Submit, list, inspect and cancel jobs.", no_args_is_help=True)

_FINAL = ("succeeded", "failed", "cancelled")
_JOB_COLUMNS = ["id", "name", "queue", "priority", "state", "attempt", "submitted", "reason"]
#: Seconds ``submit --wait`` waits for a worker to appear before giving up.
NO_WORKER_GRACE_S = 10.0
_POLL_S = 0.25


# --- submit ----------------------------------------------------------------------------------


def _load_spec(file: Path, overrides: dict[str, Any]) -> Any:
    """Read FILE, apply command-line overrides, validate (errors name the file and the key)."""
    from aifab.core.config import load_yaml, parse_config
    from aifab.core.errors import InvalidInputError
    from aifab.jobs.spec import JobSpec

    data = load_yaml(file)
    if not isinstance(data, dict):
        raise InvalidInputError(f"{file}: a job spec must be a mapping (name, run, resources...)")
    data.update({k: v for k, v in overrides.items() if v is not None})
    spec = parse_config(JobSpec, data, str(file))
    _check_recipe_config(spec, file)
    return spec


def _check_recipe_config(spec: Any, file: Path) -> None:
    """Validate a training recipe's config here, not in a pod minutes later (dry runs too)."""
    from aifab.core.errors import InvalidInputError
    from aifab.train.recipes import RECIPE_CONFIGS
    from aifab.train.submit import load_recipe_config

    if spec.run.recipe in RECIPE_CONFIGS:
        try:
            load_recipe_config(spec.run.recipe, spec.run.config)
        except InvalidInputError as exc:
            raise InvalidInputError(f"{file}: run.config: {exc}") from None


def _dry_run(spec: Any, image: str | None = None) -> None:
    if spec.executor == "volcano":
        from aifab.jobs.executors.volcano import dry_run_job

        sys.stdout.write(str(dry_run_job(spec, image=image)).rstrip("\n") + "\n")
        return
    import yaml

    sys.stdout.write(yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))
    sys.stderr.write("dry run: the spec is valid; nothing was submitted\n")


@job_app.command("submit")
def submit_command(
    file: Path = typer.Argument(..., help="JobSpec YAML file.", show_default=False),
    executor: str | None = typer.Option(None, help="Override: local, ray or volcano."),
    queue: str | None = typer.Option(None, help="Override the queue."),
    priority: int | None = typer.Option(None, help="Override the priority."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Validate and print (Volcano: the rendered manifests)."
    ),
    wait: bool = typer.Option(
        False, "--wait", help="Wait until the job is final; exit 1 unless it succeeded."
    ),
    local_worker: bool = typer.Option(
        False, "--local-worker", help="With --wait: run a worker in this process meanwhile."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
    image: str | None = typer.Option(
        None,
        help="Volcano --dry-run: the container image (default AIFAB_IMAGE; workers use theirs).",
    ),
) -> None:
    """Submit a job from a YAML spec (options override the file's values)."""
    spec = _load_spec(file, {"executor": executor, "queue": queue, "priority": priority})
    if dry_run:
        _dry_run(spec, image)
        return
    from aifab.jobs.service import submit

    job = submit(spec)
    if as_json and not wait:
        print_json(job)
    elif not as_json:
        sys.stdout.write(f"{job['id']}\n")
    if not (wait or _alive(spec.executor)):
        from aifab.jobs.scheduler import unserved_reason

        sys.stderr.write(f"note: {unserved_reason(spec.executor)}\n")
    if wait:
        final = (
            wait_with_local_worker(job["id"], spec.executor)
            if local_worker
            else wait_for_job(job["id"], job)
        )
        report_final(final, as_json)


def report_final(job: dict[str, Any], as_json: bool) -> None:
    """Print a final job (one line, or JSON); exit 1 unless it succeeded."""
    if as_json:
        print_json(job)
    else:
        tail = f": {job['reason']}" if job["reason"] else ""
        sys.stdout.write(f"{job['id']} {job['state']}{tail}\n")
    if job["state"] != "succeeded":
        raise typer.Exit(1)


def _alive(executor: str) -> int:
    from aifab.jobs.service import list_workers

    return sum(1 for w in list_workers(alive_only=True) if w["executor"] == executor)


def wait_for_job(job_id: str, job: dict[str, Any]) -> dict[str, Any]:
    """Poll until the job is final; give up after a grace if no worker is alive for it."""
    from aifab.jobs.service import get_job

    orphan_since: float | None = None
    while job["state"] not in _FINAL:
        time.sleep(_POLL_S)
        job = get_job(job_id)
        if _alive(job["executor"]):
            orphan_since = None
            continue
        orphan_since = orphan_since or time.time()
        if time.time() - orphan_since >= NO_WORKER_GRACE_S:
            sys.stderr.write(
                f"error: no '{job['executor']}' worker is running, so {job_id} stays "
                f"{job['state']}: "
                "start one with 'aifab worker' or submit with --wait --local-worker\n"
            )
            raise typer.Exit(1)
    return job


def wait_with_local_worker(job_id: str, executor: str) -> dict[str, Any]:
    """Run a worker in this (main) thread until ``job_id`` is final."""
    from aifab.jobs.worker import run_until_final

    stop = threading.Event()
    with _stop_on_signals(stop):
        return run_until_final(job_id, executor, stop)


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and the first Ctrl-C set ``stop`` (attempts stop cleanly); a second Ctrl-C aborts."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        sys.stderr.write("stopping: finishing running attempts (Ctrl-C again to abort)\n")
        stop.set()

    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


# --- list / show / logs / cancel / retry -----------------------------------------------------


def _job_row(j: dict[str, Any]) -> dict[str, Any]:
    return {**j, "submitted": when(j["submitted_at"])}


@job_app.command("list")
def list_command(
    state: str | None = typer.Option(None, help="pending, running, succeeded, failed, cancelled."),
    queue: str | None = typer.Option(None, help="Only this queue."),
    limit: int = typer.Option(100, help="How many, newest first."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """List jobs, newest first."""
    from aifab.jobs.service import list_jobs

    jobs = list_jobs(state=state, queue=queue, limit=limit)
    emit(jobs if as_json else [_job_row(j) for j in jobs], as_json, _JOB_COLUMNS)


@job_app.command("show")
def show_command(
    job_id: str = typer.Argument(..., help="Job id."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show a job: its state, why it waits or failed, its attempts, events and usage."""
    from aifab.jobs.service import get_job

    job = get_job(job_id)
    if as_json:
        print_json(job)
        return
    summary = {k: job[k] for k in ("id", "name", "state", "queue", "priority", "executor")}
    summary["reason"] = job["reason"]
    summary["attempts"] = job["attempt"]
    summary["exit_code"] = job["exit_code"]
    summary.update({k: when(job[f"{k}_at"]) for k in ("submitted", "started", "finished")})
    summary["usage"] = {k: v for k, v in job["usage"].items() if k != "replicas"}
    emit(summary, False, title=f"job {job_id}")
    if job["attempts"]:
        rows = [
            {**a, "started": when(a["started_at"]), "finished": when(a["finished_at"])}
            for a in job["attempts"]
        ]
        cols = ["number", "state", "placement", "exit_codes", "started", "finished", "reason"]
        print_table(rows, cols, title="attempts")
    events = [{**e, "ts": when(e["ts"])} for e in job["events"]]
    print_table(events, ["ts", "kind", "message"], title="events")


def _copy_whole(chunks: Iterator[bytes]) -> None:
    """Write a log to stdout, a chunk at a time (a character split between chunks survives)."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for data in chunks:
        sys.stdout.write(decoder.decode(data))
    sys.stdout.write(decoder.decode(b"", final=True))
    sys.stdout.flush()


@job_app.command("logs")
def logs_command(
    job_id: str = typer.Argument(..., help="Job id."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Follow until the job is final."),
    replica: int = typer.Option(0, help="Replica rank."),
    attempt: int | None = typer.Option(None, help="Attempt number (default: the latest)."),
) -> None:
    """Print a replica's log (the latest attempt unless --attempt is given)."""
    from aifab.core.errors import InvalidInputError, NotFoundError
    from aifab.jobs.service import get_job

    job = get_job(job_id)
    job_id = job["id"]  # a unique prefix names the job
    replicas = int(job["spec"]["replicas"])
    if not 0 <= replica < replicas:
        raise InvalidInputError(f"--replica {replica}: job {job_id} has ranks 0..{replicas - 1}")
    if attempt is not None and not 1 <= attempt <= max(job["attempt"], 1):
        raise InvalidInputError(
            f"--attempt {attempt}: job {job_id} has {job['attempt']} attempt(s)"
        )
    if follow:
        _follow(job_id, attempt, replica)
        return
    from aifab.jobs.logs import read_log

    number = attempt or job["attempt"]
    chunks = read_log(job_id, number, replica) if number else None
    if chunks is None:
        raise NotFoundError(f"no log yet for job {job_id} (state {job['state']}); try -f")
    _copy_whole(chunks)


def _follow(job_id: str, fixed: int | None, replica: int) -> None:
    """Stream the log, moving on to new attempts (re-queues, retries) until the job is final."""
    from aifab.jobs.logs import LogCursor, tail_log

    cursor = LogCursor(fixed, 0) if fixed else None
    while True:
        # From the start of the attempt (start_bytes: the whole log), whole lines at a time.
        tail = tail_log(job_id, cursor, replica=replica, start_bytes=sys.maxsize)
        if fixed is not None and tail.cursor.attempt > fixed:
            return  # the job moved past the attempt asked for
        if tail.text:
            sys.stdout.write(tail.text)
            sys.stdout.flush()
        if tail.final:
            return
        cursor = tail.cursor
        if not tail.text:
            time.sleep(_POLL_S)


def _state_command(action: str, job_id: str, as_json: bool) -> None:
    from aifab.jobs import service

    job = service.cancel(job_id) if action == "cancel" else service.retry(job_id)
    if as_json:
        print_json(job)
    else:
        sys.stdout.write(f"{job['id']} {job['state']}: {job['reason']}\n")


@job_app.command("cancel")
def cancel_command(
    job_id: str = typer.Argument(..., help="Job id."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Cancel a job (a running one is stopped by its worker)."""
    _state_command("cancel", job_id, as_json)


@job_app.command("retry")
def retry_command(
    job_id: str = typer.Argument(..., help="Job id."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Queue a failed or cancelled job again."""
    _state_command("retry", job_id, as_json)


# --- worker ----------------------------------------------------------------------------------


def worker_command(
    executor: str = typer.Option("local", help="Executor to run jobs on: local, ray, volcano."),
    lease: float = typer.Option(15.0, help="Seconds a job's lease lasts between heartbeats."),
    poll: float = typer.Option(0.2, help="Seconds between idle scheduling cycles."),
    exit_when_idle: float | None = typer.Option(
        None, help="Exit after this many seconds with nothing pending or running."
    ),
    policy: str = typer.Option("aifab", help="Scheduling policy: aifab or fifo."),
) -> None:
    """Run a scheduler + executor loop until Ctrl-C or SIGTERM (running attempts are re-queued)."""
    from aifab.core.errors import InvalidInputError
    from aifab.jobs.resources import total
    from aifab.jobs.worker import Worker, WorkerOptions

    if policy not in ("aifab", "fifo"):
        raise InvalidInputError(f"--policy: expected aifab or fifo, got {policy!r}")
    if lease <= 0 or poll <= 0:
        raise InvalidInputError("--lease and --poll must be > 0")
    options = WorkerOptions(
        executor=executor,
        lease_s=lease,
        poll_s=poll,
        policy="fifo" if policy == "fifo" else "aifab",
        exit_when_idle_s=exit_when_idle,
    )
    worker = Worker(options)
    cap = total([n.capacity for n in worker.executor.nodes()])
    sys.stdout.write(
        f"worker {worker.id}: executor {worker.executor.name}, cpu {cap.cpu:g}, memory "
        f"{cap.memory_mb:.0f} MiB, gpu {cap.gpu}, policy {policy} (Ctrl-C to stop)\n"
    )
    from aifab.jobs.scheduler import mark_unserved

    for other, count in sorted(mark_unserved().items()):
        sys.stdout.write(
            f"{count} pending job(s) are for executor {other}: {other} jobs run under "
            f"'aifab worker --executor {other}'\n"
        )
    sys.stdout.flush()
    stop = threading.Event()
    with _stop_on_signals(stop):
        worker.run(stop)
    sys.stdout.write(f"worker {worker.id} stopped\n")


def register(app: typer.Typer) -> None:
    """Add the ``job`` group and the ``worker`` command to ``app``."""
    app.add_typer(job_app, name="job")
    app.command("worker")(worker_command)
