"""``aifab deploy`` and ``aifab deployments``: put models behind the gateway, canaries, requests.

Deployments live in the metadata DB; ``aifab serve`` (and any running server, within a second)
loads what they describe.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from aifab.cli.output import JSON_HELP, emit, when

deployments_app = typer.Typer(help="Deployments: models served behind the gateway.")

_LIST_COLUMNS = ["name", "model", "canary", "weight", "replicas", "batch", "backend", "status"]
_REQUEST_COLUMNS = ["time", "deployment", "model_version", "key_id", "route", "status"]
_REQUEST_COLUMNS += ["latency_ms", "tokens", "input", "output"]
_NAME_HELP = "Deployment name (default: the model's name)."
_REPLICAS_HELP = "Worker threads running the model (1-16)."
_BATCH_HELP = "Most items the server batches into one model call (1-1024)."
_WAIT_HELP = "Longest a request waits for a batch to fill, in ms (0-1000)."
_BACKEND_HELP = "torch or onnx (onnxruntime)."
_CANARY_HELP = "A second model (NAME@VERSION) taking --weight percent of requests."
_WEIGHT_HELP = "Percent of requests the canary takes (default 10 with --canary)."
_STICKY_HELP = "Route by this request header's value: the same value, the same model."
_OPTION_HELP = "Handler option KEY=VALUE (e.g. max_tokens_limit=256); repeatable."
_SOURCE_HELP = "NAME@ALIAS or NAME@VERSION, builtin:all-minilm-l6-v2, or a model directory."


def _options(items: list[str] | None) -> dict[str, Any]:
    """``KEY=VALUE`` items -> a dict; values are read as YAML scalars (numbers, booleans)."""
    import yaml

    from aifab.core.errors import InvalidInputError

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidInputError(f"--option {item!r}: expected KEY=VALUE")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError:
            out[key.strip()] = value
    return out


def _none(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "none"


def _show(dep: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit(dep, True)
        return
    shown = {**dep, "created_at": when(dep["created_at"]), "updated_at": when(dep["updated_at"])}
    if dep.get("status") == "pending":
        # ``serving`` is what the servers last reported, i.e. the previous generation's models:
        # printed right after a change it would contradict the change just made.
        shown["serving"] = (
            f"(generation {dep.get('generation')} pending: running servers load it within a "
            "second; `aifab deployments list` shows what they serve)"
        )
    emit(shown, False, title=f"deployment {dep['name']}")


def _short(value: Any, limit: int = 60) -> str:
    """A JSON value cut to fit a table cell (``--json`` shows it whole)."""
    import json

    text = "" if value is None else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _rows(deps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **d,
            "weight": f"{d['canary_weight']:g}%" if d["canary"] else "",
            "batch": f"{d['max_batch_size']} / {d['max_wait_ms']:g} ms",
        }
        for d in deps
    ]


def deploy(
    source: str = typer.Argument(..., help=_SOURCE_HELP, show_default=False),
    name: str | None = typer.Option(None, "--name", help=_NAME_HELP),
    replicas: int = typer.Option(1, "--replicas", help=_REPLICAS_HELP),
    max_batch_size: int = typer.Option(1, "--max-batch-size", help=_BATCH_HELP),
    max_wait_ms: float = typer.Option(0.0, "--max-wait-ms", help=_WAIT_HELP),
    backend: str = typer.Option("torch", "--backend", help=_BACKEND_HELP),
    canary: str | None = typer.Option(None, "--canary", help=_CANARY_HELP),
    weight: float | None = typer.Option(None, "--weight", help=_WEIGHT_HELP),
    sticky_header: str | None = typer.Option(None, "--sticky-header", help=_STICKY_HELP),
    option: list[str] | None = typer.Option(None, "--option", help=_OPTION_HELP),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Deploy a model: it is served under /v1/... by 'aifab serve' (running servers pick it up)."""
    from aifab.inference.deployments import create_deployment

    dep = create_deployment(
        source,
        name=name,
        replicas=replicas,
        max_batch_size=max_batch_size,
        max_wait_ms=max_wait_ms,
        backend=backend,
        canary=canary,
        canary_weight=(10.0 if canary else 0.0) if weight is None else weight,
        sticky_header=sticky_header,
        options=_options(option),
    )
    _show(dep, as_json)
    if not as_json:
        sys.stdout.write(
            f"deployed {dep['name']}: 'aifab serve' serves it at /v1/predict/{dep['name']} "
            "(a running server loads it within seconds)\n"
        )


@deployments_app.command("list")
def list_command(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """List deployments with their models, canaries and status."""
    from aifab.inference.deployments import list_deployments

    deps = list_deployments()
    emit(deps if as_json else _rows(deps), as_json, _LIST_COLUMNS)


@deployments_app.command("show")
def show_command(
    name: str = typer.Argument(..., help="Deployment name.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show one deployment: settings, generation, status and what is being served."""
    from aifab.inference.deployments import get_deployment

    _show(get_deployment(name), as_json)


@deployments_app.command("update")
def update_command(
    name: str = typer.Argument(..., help="Deployment name.", show_default=False),
    model: str | None = typer.Option(None, "--model", help="Serve this model instead."),
    replicas: int | None = typer.Option(None, "--replicas", help=_REPLICAS_HELP),
    max_batch_size: int | None = typer.Option(None, "--max-batch-size", help=_BATCH_HELP),
    max_wait_ms: float | None = typer.Option(None, "--max-wait-ms", help=_WAIT_HELP),
    backend: str | None = typer.Option(None, "--backend", help=_BACKEND_HELP),
    canary: str | None = typer.Option(None, "--canary", help=_CANARY_HELP + " 'none' removes."),
    weight: float | None = typer.Option(None, "--weight", help=_WEIGHT_HELP),
    sticky_header: str | None = typer.Option(
        None, "--sticky-header", help=_STICKY_HELP + " 'none' removes."
    ),
    option: list[str] | None = typer.Option(
        None, "--option", help=_OPTION_HELP + " Merged; KEY=null removes one."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Change a deployment's settings; servers reload it (unchanged settings change nothing)."""
    from aifab.inference.deployments import get_deployment, update_deployment

    changes: dict[str, Any] = {
        k: v
        for k, v in {
            "model": model,
            "replicas": replicas,
            "max_batch_size": max_batch_size,
            "max_wait_ms": max_wait_ms,
            "backend": backend,
            "canary_weight": weight,
        }.items()
        if v is not None
    }
    if canary is not None:
        changes["canary"] = None if _none(canary) else canary
        if changes["canary"] and weight is None and not get_deployment(name)["canary"]:
            changes["canary_weight"] = 10.0
    if sticky_header is not None:
        changes["sticky_header"] = None if _none(sticky_header) else sticky_header
    if option:
        merged = {**get_deployment(name)["options"], **_options(option)}
        changes["options"] = {k: v for k, v in merged.items() if v is not None}
    _show(update_deployment(name, **changes), as_json)


@deployments_app.command("promote")
def promote_command(
    name: str = typer.Argument(..., help="Deployment name.", show_default=False),
    force: bool = typer.Option(
        False, "--force", help="Promote even when the canary's recorded test accuracy is lower."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Make the canary the primary (moving the primary's alias to it when it has one)."""
    from aifab.inference.deployments import promote_canary

    _show(promote_canary(name, force=force), as_json)


@deployments_app.command("rollback")
def rollback_command(
    name: str = typer.Argument(..., help="Deployment name.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Drop the canary: all requests go to the primary model again."""
    from aifab.inference.deployments import rollback_canary

    _show(rollback_canary(name), as_json)


@deployments_app.command("delete")
def delete_command(name: str = typer.Argument(..., help="Deployment name.")) -> None:
    """Delete a deployment (servers unload it; its request log is kept)."""
    from aifab.inference.deployments import delete_deployment

    delete_deployment(name)
    sys.stdout.write(f"deleted deployment {name}\n")


@deployments_app.command("wait")
def wait_command(
    name: str | None = typer.Argument(None, help="Wait for this deployment only."),
    url: str = typer.Option("http://127.0.0.1:8000", "--url", help="The server to ask."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds to wait at most."),
) -> None:
    """Wait until a running server has loaded every deployment (or NAME); exit 1 on a failure.

    Run it after `aifab serve &`: a request sent once it returns does not meet 503 "still
    loading". It waits for a server that is still starting, too.
    """
    from aifab.core.errors import AifabError, InvalidInputError
    from aifab.inference.deployments import get_deployment
    from aifab.serve.readiness import ready_line, wait_ready

    if not timeout > 0:
        raise InvalidInputError(f"--timeout {timeout:g}: expected seconds above 0")
    if name is not None:
        get_deployment(name)  # an unknown name fails now, not after the timeout
    body = wait_ready(url, timeout_s=timeout) or {}
    if name is None:
        sys.stdout.write(ready_line(url, body) + "\n")
        if body.get("failed"):
            raise AifabError(f"{body['failed']} deployment(s) failed to load on {url}")
        return
    dep = _reported(name, timeout)
    if dep["status"] == "failed":
        raise AifabError(f"deployment {name} failed to load: {dep.get('status_reason')}")
    serving = ", ".join(f"{k} {v}" for k, v in (dep.get("serving") or {}).items() if v)
    sys.stdout.write(f"deployment {name} ready on {url} ({serving or 'serving'})\n")


def _reported(name: str, timeout: float) -> dict[str, Any]:
    """The deployment once a server has reported it ready or failed.

    The report trails ``/readyz`` by a moment: it is written after the model is swapped in.
    """
    import time

    from aifab.inference.deployments import get_deployment
    from aifab.serve.readiness import ReadyTimeoutError

    deadline = time.monotonic() + timeout
    while (dep := get_deployment(name))["status"] not in ("ready", "failed"):
        if time.monotonic() > deadline:
            raise ReadyTimeoutError(f"deployment {name} still {dep['status']} after {timeout:g} s")
        time.sleep(0.1)
    return dep


@deployments_app.command("requests")
def requests_command(
    name: str | None = typer.Argument(None, help="Only this deployment's requests."),
    limit: int = typer.Option(20, "--limit", help="How many, newest first (1-10000)."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show the sampled request log: who called which model version, how it went."""
    from aifab.inference.request_log import recent_requests

    rows = recent_requests(name, limit=limit)
    if not as_json:
        rows = [
            {
                **r,
                "time": when(r["ts"]),
                "latency_ms": round(r["latency_ms"], 2),
                "input": _short(r["input"]),
                "output": _short(r["output"]),
            }
            for r in rows
        ]
    emit(rows, as_json, _REQUEST_COLUMNS)


def register(app: typer.Typer) -> None:
    """Add ``deploy`` and the ``deployments`` group to ``app``."""
    app.command("deploy")(deploy)
    app.add_typer(deployments_app, name="deployments", no_args_is_help=True)
