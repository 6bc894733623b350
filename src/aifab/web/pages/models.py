"""``/ui/models``: registered models, versions, aliases, lineage, export reports, model cards.

Developers move aliases and build cards here.

The data engineer's lineage graph links model versions to ``/ui/models/<name>/<version>``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import RedirectResponse

from aifab.core.actor import acting_as
from aifab.core.errors import AifabError, InvalidInputError, NotFoundError
from aifab.inference.deployments import list_deployments
from aifab.track import get_run, list_models, list_versions, read_artifact, resolve_model, set_alias
from aifab.web import charts
from aifab.web.auth import Viewer, need, read_form, viewer
from aifab.web.pages.runs import data_href
from aifab.web.render import page
from aifab.web.routing import UiRoute

__all__ = ["router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)

_EXPORT_TAG = "aifab.export."
_CARD = "card"


@router.get("/ui/models")
async def models(request: Request, who: Viewer = Depends(viewer)) -> Response:
    """Every registered model with its latest version and aliases."""
    rows = await asyncio.to_thread(list_models)
    return page(request, "models/list.html", models=rows)


def _model(name: str) -> dict[str, Any]:
    versions = list_versions(name)
    for v in versions:
        v["exports"] = sorted(
            k.removeprefix(_EXPORT_TAG) for k in v["tags"] if k.startswith(_EXPORT_TAG)
        )
    aliases = {a: v["version"] for v in versions for a in v["aliases"]}
    return {"name": name, "versions": versions, "aliases": dict(sorted(aliases.items()))}


@router.get("/ui/models/{name}")
async def model(request: Request, name: str, who: Viewer = Depends(viewer)) -> Response:
    """One model: its versions (newest first), aliases and, for developers, the alias form."""
    data = await asyncio.to_thread(_model, name)
    return page(request, "models/model.html", **data)


@router.post("/ui/models/{name}/alias")
async def move_alias(request: Request, name: str, who: Viewer = Depends(viewer)) -> Response:
    """Point an alias (``champion``...) at a version; deployments following it move too."""
    fields = await read_form(request, who)
    need(who, "deploy")
    alias = fields.get("alias", "").strip()
    version = _version_number(fields.get("version", ""))

    def run() -> None:
        with acting_as(who.actor):
            set_alias(name, alias, version)

    await asyncio.to_thread(run)
    _poke(request)
    return RedirectResponse(f"/ui/models/{name}", status_code=303)


def _poke(request: Request) -> None:
    """Have this server reload deployments now (one following a moved alias changes model)."""
    manager = getattr(request.app.state, "manager", None)
    if manager is not None:
        manager.poke()


def _version_number(text: str) -> int:
    if not text.strip().isdigit():
        raise InvalidInputError(f"version {text!r}: expected a version number")
    return int(text)


def _serving(mv: dict[str, Any]) -> list[dict[str, Any]]:
    """The deployments whose primary or canary is this version now."""
    resolved: dict[str, int | None] = {}

    def version_of(ref: str | None) -> int | None:
        if not ref or ref.startswith("builtin:") or not ref.startswith(mv["name"] + "@"):
            return None
        if ref not in resolved:
            try:
                resolved[ref] = int(resolve_model(ref)["version"])
            except AifabError:
                resolved[ref] = None
        return resolved[ref]

    out = []
    for d in list_deployments():
        roles = [r for r in ("model", "canary") if version_of(d[r]) == mv["version"]]
        if roles:
            out.append({**d, "roles": ["primary" if r == "model" else r for r in roles]})
    return out


def _artifact_json(run_id: str | None, path: str) -> Any:
    if not run_id:
        return None
    try:
        return json.loads(read_artifact(run_id, path))
    except (NotFoundError, InvalidInputError, ValueError):
        return None


def _artifact_text(run_id: str | None, path: str) -> str | None:
    if not run_id:
        return None
    try:
        return read_artifact(run_id, path).decode("utf-8", errors="replace")
    except (NotFoundError, InvalidInputError):
        return None


def _exports(mv: dict[str, Any]) -> list[dict[str, Any]]:
    """The version's export reports (tags ``aifab.export.<fmt>``), with their report.json."""
    out = []
    for tag, uri in sorted(mv["tags"].items()):
        fmt = tag.removeprefix(_EXPORT_TAG)
        if tag.startswith(_EXPORT_TAG) and fmt != _CARD:
            report = _artifact_json(mv["run_id"], f"exports/{fmt}/report.json")
            out.append({"format": fmt, "uri": uri, "report": report})
    return out


def _card(mv: dict[str, Any]) -> dict[str, Any] | None:
    """The attached model card (built by ``aifab models card``), or None."""
    if _EXPORT_TAG + _CARD not in mv["tags"]:
        return None
    fields = _artifact_json(mv["run_id"], "exports/card/card.json")
    markdown = _artifact_text(mv["run_id"], "exports/card/card.md")
    if not isinstance(fields, dict):
        return None
    importance = (fields.get("explanation") or {}).get("permutation_importance") or []
    chart = None
    if importance:
        top = importance[:15]
        chart = charts.bars(
            [str(d.get("feature")) for d in top],
            {"permutation importance": [d.get("importance") for d in top]},
            y_label="accuracy lost",
        )
    return {"fields": fields, "markdown": markdown, "chart": chart}


def _lineage(run_id: str | None) -> tuple[dict[str, Any] | None, str | None]:
    if not run_id:
        return None, "this version has no run"
    try:
        run = get_run(run_id)
    except NotFoundError as exc:
        return None, str(exc)
    for ds in run["datasets"]:
        ds["href"] = data_href(ds.get("ref"))
    return run, None


def _version(name: str, version: int) -> dict[str, Any]:
    mv = resolve_model(f"{name}@{version}")
    run, run_note = _lineage(mv["run_id"])
    return {
        "mv": mv,
        "run": run,
        "run_note": run_note,
        "deployments": _serving(mv),
        "exports": _exports(mv),
        "card": _card(mv),
        "tags": {k: v for k, v in mv["tags"].items() if not k.startswith(_EXPORT_TAG)},
    }


@router.get("/ui/models/{name}/{version}")
async def model_version(
    request: Request, name: str, version: str, who: Viewer = Depends(viewer)
) -> Response:
    """One version: its lineage (run, datasets, deployments), export reports and model card."""
    if not version.isdigit():
        raise NotFoundError(f"model {name!r} has no version {version!r}: versions are numbers")
    data = await asyncio.to_thread(_version, name, int(version))
    return page(request, "models/version.html", **data)


@router.post("/ui/models/{name}/{version}/card")
async def build_card(
    request: Request, name: str, version: str, who: Viewer = Depends(viewer)
) -> Response:
    """Build the version's model card from its lineage and attach it (as ``aifab models card``)."""
    fields = await read_form(request, who)
    need(who, "deploy")
    number = _version_number(version)
    intended = fields.get("intended_use", "").strip() or None
    limits = fields.get("limitations", "").strip() or None

    def run() -> None:
        from aifab.ops import build_card as build

        with acting_as(who.actor):
            build(f"{name}@{number}", intended_use=intended, limitations=limits)

    await asyncio.to_thread(run)
    return RedirectResponse(f"/ui/models/{name}/{number}#card", status_code=303)
