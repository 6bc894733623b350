"""``aifab models``: the model registry (list, show, versions, promote an alias, lineage).

The model zoo and export modules add ``zoo`` and ``export`` to :data:`models_app`.
"""

from __future__ import annotations

import typer

from aifab.cli import fast_runs, models_card, models_export, models_zoo
from aifab.cli.output import JSON_HELP, emit, when

models_app = typer.Typer(
    help="Registered models, their versions and aliases.", no_args_is_help=True
)

_MODEL_COLUMNS = ["name", "latest", "versions", "aliases", "updated_at"]
_VERSION_COLUMNS = ["version", "aliases", "run_id", "source", "status", "created_at"]


@models_app.command("list")
def list_command(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """List registered models with their latest version and aliases."""
    rows = fast_runs.list_models()
    if rows is None:
        from aifab.track import list_models

        rows = list_models()
    if not as_json:
        rows = [{**r, "updated_at": when(r["updated_at"])} for r in rows]
    emit(rows, as_json, _MODEL_COLUMNS)


@models_app.command("show")
def show_command(
    ref: str = typer.Argument(..., help="NAME, NAME@VERSION or NAME@ALIAS.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show one model version (the latest unless a version or alias is given)."""
    from aifab.track import resolve_model

    version = resolve_model(ref)
    if not as_json:
        version = {**version, "created_at": when(version["created_at"])}
    emit(version, as_json, title=f"{version['name']}@{version['version']}")


@models_app.command("versions")
def versions_command(
    name: str = typer.Argument(..., help="Model name.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """List the versions of a model, newest first."""
    from aifab.track import list_versions

    rows = list_versions(name)
    if not as_json:
        rows = [{**r, "created_at": when(r["created_at"])} for r in rows]
    emit(rows, as_json, _VERSION_COLUMNS)


@models_app.command("promote")
def promote_command(
    name: str = typer.Argument(..., help="Model name.", show_default=False),
    version: int = typer.Argument(..., help="Version to promote.", show_default=False),
    alias: str = typer.Option("champion", "--alias", help="Alias to point at the version."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Point an alias (default ``champion``) at a version; it moves from where it was."""
    from aifab.track import set_alias

    result = set_alias(name, alias, version)
    if as_json:
        emit(result, True)
        return
    was = f" (was version {result['previous']})" if result["previous"] else ""
    emit(f"{name}@{alias} -> version {result['version']}{was}", False)


@models_app.command("lineage")
def lineage_command(
    ref: str = typer.Argument(..., help="NAME, NAME@VERSION or NAME@ALIAS."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Walk back from a model version: its run, the dataset versions it read, their lineage."""
    from aifab.train.lineage import model_lineage

    graph = model_lineage(ref)
    if as_json:
        emit(graph, True)
        return
    model, run = graph["model"], graph["run"] or {}
    emit(
        {
            "model": f"{model['name']}@{model['version']}",
            "aliases": model.get("aliases"),
            "run": run.get("id"),
            "experiment": run.get("experiment"),
            "metrics": run.get("metrics"),
        },
        False,
        title=f"lineage of {ref}",
    )
    for ds in graph["datasets"]:
        nodes = (ds.get("lineage") or {}).get("nodes", [])
        emit(
            [
                {
                    "ref": n["ref"],
                    "transform": n["transform"],
                    "rows": n["rows"],
                    "source": n["source"],
                }
                for n in nodes
            ],
            False,
            ["ref", "transform", "rows", "source"],
            title=f"{ds['context']} data {ds['ref']} and its ancestry",
        )


def register(app: typer.Typer) -> None:
    """Add the ``models`` group (with ``zoo`` and ``export`` from their modules) to ``app``."""
    models_zoo.register_zoo(models_app)
    models_export.register_export(models_app)
    models_card.register_governance(models_app, app)
    app.add_typer(models_app, name="models")
