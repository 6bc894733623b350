"""``/ui/data/NAME/versions/N/lineage``: the cross-layer lineage of one dataset version.

Source -> versions -> features -> runs -> models -> deployments, drawn as an inline SVG of
links (and as a list for screen readers).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from aifab.core.errors import AifabError
from aifab.data import lineage
from aifab.data.features import list_feature_sets
from aifab.inference.deployments import list_deployments
from aifab.track import model_versions_of_runs, resolve_model, runs_reading
from aifab.web.auth import Viewer, viewer
from aifab.web.pages.data.graph import MAX_NODES, Node, layout
from aifab.web.pages.data.links import (
    deployment_url,
    model_url,
    parse_version,
    run_url,
    version_url,
)
from aifab.web.render import page
from aifab.web.routing import UiRoute

__all__ = ["lineage_graph", "router"]

router = APIRouter(route_class=UiRoute, include_in_schema=False)

#: Dataset generations walked each way from the version (the graph is cut at MAX_NODES).
DEPTH = 12
#: Feature sets looked at (newest first) for ones fitted on a version of the graph.
FEATURE_SETS = 500


def _data_nodes(ref: str) -> tuple[list[Node], list[tuple[str, str]], dict[str, str]]:
    """Versions and their sources; also each version's content hash by node id."""
    graph = lineage(ref, depth=DEPTH)
    nodes: list[Node] = []
    edges = [(f"v:{e['parent']}", f"v:{e['child']}") for e in graph["edges"]]
    hashes: dict[str, str] = {}
    # The root first: a graph over MAX_NODES keeps it.
    ordered = sorted(graph["nodes"], key=lambda n: n["ref"] != graph["root"])
    for n in ordered[:MAX_NODES]:
        node_id = f"v:{n['ref']}"
        nodes.append(
            Node(
                node_id,
                "version",
                n["ref"],
                f"{n['transform']}, {n['rows']:,} rows",
                version_url(n["ref"]),
                current=n["ref"] == graph["root"],
            )
        )
        hashes[node_id] = n["content_hash"]
        if n["transform"] == "ingest" and n["source"]:
            source_id = f"s:{n['source']}"
            nodes.append(
                Node(source_id, "source", os.path.basename(n["source"]) or n["source"], n["source"])
            )
            edges.append((source_id, node_id))
    return nodes, edges, hashes


def _feature_nodes(refs: set[str]) -> tuple[list[Node], list[tuple[str, str]]]:
    nodes, edges = [], []
    for fs in list_feature_sets(FEATURE_SETS):
        if fs["fitted_on"] in refs:
            node_id = f"f:{fs['name']}"
            nodes.append(
                Node(
                    node_id,
                    "features",
                    fs["name"],
                    f"feature set {fs['digest'][:12]}, {fs['features']} features",
                    version_url(fs["fitted_on"]),
                )
            )
            edges.append((f"v:{fs['fitted_on']}", node_id))
    return nodes, edges


def _run_nodes(
    hashes: dict[str, str], feature_ids: set[str]
) -> tuple[list[Node], list[tuple[str, str]], list[str]]:
    by_digest = {h[:36]: node_id for node_id, h in hashes.items()}
    nodes, edges, ids = [], [], []
    for run in runs_reading(list(hashes.values()), limit=50):
        node_id = f"r:{run['id']}"
        ids.append(run["id"])
        nodes.append(
            Node(
                node_id,
                "run",
                run["name"] or run["id"],
                f"run {run['id'][:12]} ({run['experiment']}), {run['status']}",
                run_url(run["id"]),
            )
        )
        for ds in run["datasets"]:
            source = by_digest.get((ds.get("digest") or "")[:36])
            if source:
                edges.append((source, node_id))
        features = f"f:{run['params'].get('features')}"
        if features in feature_ids:
            edges.append((features, node_id))
    return nodes, edges, ids


def _serving_nodes(run_ids: list[str]) -> tuple[list[Node], list[tuple[str, str]]]:
    nodes, edges = [], []
    models = model_versions_of_runs(run_ids)
    for mv in models:
        node_id = f"m:{mv['name']}@{mv['version']}"
        nodes.append(
            Node(
                node_id,
                "model",
                f"{mv['name']}@{mv['version']}",
                "model version",
                model_url(mv["name"], mv["version"]),
            )
        )
        edges.append((f"r:{mv['run_id']}", node_id))
    names = {mv["name"] for mv in models}
    for dep in list_deployments():
        for ref in (dep["model"], dep.get("canary")):
            if not ref or ref.split("@")[0] not in names:
                continue
            try:
                mv = resolve_model(ref)
            except AifabError:
                continue  # a deployment of a model version that is gone
            node_id = f"d:{dep['name']}"
            nodes.append(
                Node(
                    node_id,
                    "deployment",
                    dep["name"],
                    f"deployment serving {ref}",
                    deployment_url(dep["name"]),
                )
            )
            edges.append((f"m:{mv['name']}@{mv['version']}", node_id))
    return nodes, edges


def lineage_graph(ref: str) -> dict[str, Any]:
    """The cross-layer lineage of dataset version ``ref``, laid out for drawing.

    Returns:
        :func:`~aifab.web.pages.data.graph.layout`'s result plus ``ref``, and ``links``
        (``(parent node, child node)`` pairs, for the text list).
    """
    nodes, edges, hashes = _data_nodes(ref)
    feats, feat_edges = _feature_nodes({n.label for n in nodes if n.kind == "version"})
    runs, run_edges, run_ids = _run_nodes(hashes, {n.id for n in feats})
    serving, serving_edges = _serving_nodes(run_ids)
    all_nodes = nodes + feats + runs + serving
    drawn = layout(all_nodes, edges + feat_edges + run_edges + serving_edges)
    shown = {p["node"].id: p["node"] for p in drawn["nodes"]}
    at = {p["node"].id: (p["y"], p["x"]) for p in drawn["nodes"]}
    # The list reads in the drawing's order: top to bottom, left to right.
    edges_read = sorted(drawn["edges"], key=lambda e: (at[e["parent"]], at[e["child"]]))
    drawn["links"] = [(shown[e["parent"]], shown[e["child"]]) for e in edges_read]
    drawn["ref"] = ref
    return drawn


@router.get("/ui/data/{name}/versions/{version}/lineage")
async def lineage_page(
    request: Request, name: str, version: str, who: Viewer = Depends(viewer)
) -> Response:
    """The lineage graph of one dataset version."""
    ref = parse_version(name, version)
    graph = await asyncio.to_thread(lineage_graph, ref)
    return page(request, "data/lineage.html", name=name, graph=graph)
