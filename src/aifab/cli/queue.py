"""``aifab queue``: queues with fair-share weights and capabilities, in the spirit of Volcano."""

from __future__ import annotations

import sys

import typer

from aifab.cli.output import JSON_HELP, emit

queue_app = typer.Typer(help="Queues: fair-share weights and capabilities.", no_args_is_help=True)

_QUEUE_COLUMNS = ["name", "weight", "capability", "reclaimable", "pending", "running"]
_WEIGHT_HELP = "Fair-share weight (DRF)."
_CPU_HELP = "Capability: max CPU cores its running jobs hold."
_MEMORY_HELP = "Capability: max memory, e.g. 64Gi."
_GPU_HELP = "Capability: max GPUs."
_RECLAIM_HELP = "Whether other queues may reclaim what it holds above its share."


@queue_app.command("create")
def queue_create(
    name: str = typer.Argument(..., help="Queue name."),
    weight: float = typer.Option(1.0, help=_WEIGHT_HELP),
    cpu: float | None = typer.Option(None, help=_CPU_HELP),
    memory: str | None = typer.Option(None, help=_MEMORY_HELP),
    gpu: int | None = typer.Option(None, help=_GPU_HELP),
    reclaimable: bool = typer.Option(True, "--reclaimable/--no-reclaimable", help=_RECLAIM_HELP),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Create a queue."""
    from aifab.jobs.service import create_queue

    q = create_queue(name, weight=weight, cpu=cpu, memory=memory, gpu=gpu, reclaimable=reclaimable)
    emit(q if as_json else [q], as_json, _QUEUE_COLUMNS)


@queue_app.command("update")
def queue_update(
    name: str = typer.Argument(..., help="Queue name."),
    weight: float | None = typer.Option(None, help=_WEIGHT_HELP),
    cpu: float | None = typer.Option(None, help=_CPU_HELP + " Replaces the capability."),
    memory: str | None = typer.Option(None, help=_MEMORY_HELP + " Replaces the capability."),
    gpu: int | None = typer.Option(None, help=_GPU_HELP + " Replaces the capability."),
    reclaimable: bool | None = typer.Option(
        None, "--reclaimable/--no-reclaimable", help=_RECLAIM_HELP, show_default=False
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Change a queue's weight, capability or reclaimability."""
    from aifab.jobs.service import update_queue

    q = update_queue(name, weight=weight, cpu=cpu, memory=memory, gpu=gpu, reclaimable=reclaimable)
    emit(q if as_json else [q], as_json, _QUEUE_COLUMNS)


@queue_app.command("list")
def queue_list(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """List queues with their pending and running jobs."""
    from aifab.jobs.service import list_queues

    emit(list_queues(), as_json, _QUEUE_COLUMNS)


@queue_app.command("delete")
def queue_delete(name: str = typer.Argument(..., help="Queue name.")) -> None:
    """Delete a queue with no pending or running jobs."""
    from aifab.jobs.service import delete_queue

    delete_queue(name)
    sys.stdout.write(f"deleted queue {name}\n")


def register(app: typer.Typer) -> None:
    """Add the ``queue`` group to ``app``."""
    app.add_typer(queue_app, name="queue")
