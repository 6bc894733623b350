"""A lineage graph laid out in layers (left to right) for a server-rendered inline SVG.

Pure functions over plain nodes and edges: each node's layer is its longest path from a root,
nodes in a layer are ordered by their parents' mean position, and edges are cubic curves.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_NODES", "Node", "layout"]

#: A graph over this many nodes is cut (the nearest nodes to the root are kept).
MAX_NODES = 150
NODE_W, NODE_H = 190, 44
GAP_X, GAP_Y = 60, 18
PAD = 12
_LABEL_CHARS = 24


@dataclass(frozen=True)
class Node:
    """A node: its id, kind (source, version, features, run, model, deployment), text, link."""

    id: str
    kind: str
    label: str
    detail: str = ""
    href: str | None = None
    current: bool = False


def _layers(ids: list[str], edges: Sequence[tuple[str, str]]) -> dict[str, int]:
    """Longest-path layering (Kahn's order); a node on a cycle keeps the layer it reached."""
    children: dict[str, list[str]] = defaultdict(list)
    indegree = dict.fromkeys(ids, 0)
    for parent, child in edges:
        children[parent].append(child)
        indegree[child] += 1
    layer = dict.fromkeys(ids, 0)
    ready = [i for i in ids if indegree[i] == 0]
    while ready:
        current = ready.pop()
        for child in children[current]:
            layer[child] = max(layer[child], layer[current] + 1)
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    return layer


def _short(text: str) -> str:
    return text if len(text) <= _LABEL_CHARS else text[: _LABEL_CHARS - 1] + "…"


def layout(nodes: Sequence[Node], edges: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Positions for ``nodes`` and curves for ``edges`` (parent id, child id).

    Returns:
        ``{"nodes": [{"node", "x", "y", "short"}], "edges": [{"parent", "child", "path"}],
        "width", "height", "cut"}``; ``cut`` counts nodes left out over :data:`MAX_NODES`.
    """
    kept = list({n.id: n for n in nodes}.values())
    cut = max(0, len(kept) - MAX_NODES)
    kept = kept[:MAX_NODES]
    by_id = {n.id: n for n in kept}
    links = sorted({(p, c) for p, c in edges if p in by_id and c in by_id and p != c})
    layer = _layers(list(by_id), links)
    parents: dict[str, list[str]] = defaultdict(list)
    for p, c in links:
        parents[c].append(p)
    columns: dict[int, list[str]] = defaultdict(list)
    for node_id in by_id:
        columns[layer[node_id]].append(node_id)
    row: dict[str, float] = {}
    for depth in sorted(columns):

        def rank(node_id: str) -> tuple[float, str]:
            above = [row[p] for p in parents[node_id] if p in row]
            return (sum(above) / len(above) if above else 0.0, by_id[node_id].label)

        for i, node_id in enumerate(sorted(columns[depth], key=rank)):
            row[node_id] = float(i)
    pos = {
        i: (PAD + layer[i] * (NODE_W + GAP_X), PAD + int(row[i]) * (NODE_H + GAP_Y)) for i in by_id
    }
    placed = [
        {"node": by_id[i], "x": pos[i][0], "y": pos[i][1], "short": _short(by_id[i].label)}
        for i in by_id
    ]
    curves = []
    for p, c in links:
        (x1, y1), (x2, y2) = pos[p], pos[c]
        x1, y1, y2 = x1 + NODE_W, y1 + NODE_H // 2, y2 + NODE_H // 2
        mid = (x1 + x2) / 2
        curves.append(
            {"parent": p, "child": c, "path": f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}"}
        )
    width = PAD * 2 + (max(layer.values(), default=0) + 1) * (NODE_W + GAP_X) - GAP_X
    height = PAD * 2 + (max(len(v) for v in columns.values()) if columns else 0) * (NODE_H + GAP_Y)
    return {"nodes": placed, "edges": curves, "width": width, "height": height, "cut": cut}
