"""A lineage graph laid out in layers (top to bottom) for a server-rendered inline SVG.

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
GAP_X, GAP_Y = 48, 40
PAD = 12
_LABEL_CHARS = 22


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


def _curve(start: tuple[int, int], end: tuple[int, int]) -> str:
    """An SVG path from a parent box to a child box below it.

    Adjacent layers join bottom to top; an edge skipping layers leaves and enters by the
    right sides, bulging into the gap, so it does not run through the boxes between.
    """
    (x1, y1), (x2, y2) = start, end
    if y2 - y1 <= NODE_H + GAP_Y:
        x1, x2, y1 = x1 + NODE_W // 2, x2 + NODE_W // 2, y1 + NODE_H
        mid = (y1 + y2) / 2
        return f"M{x1},{y1} C{x1},{mid} {x2},{mid} {x2},{y2}"
    x1, x2, y1, y2 = x1 + NODE_W, x2 + NODE_W, y1 + NODE_H // 2, y2 + NODE_H // 2
    out = max(x1, x2) + GAP_X
    return f"M{x1},{y1} C{out},{y1} {out},{y2} {x2},{y2}"


def layout(nodes: Sequence[Node], edges: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Positions for ``nodes`` and curves for ``edges`` (parent id, child id).

    Returns:
        ``{"nodes": [{"node", "x", "y", "short"}], "edges": [{"parent", "child", "path"}],
        "width", "height", "cut", "node_w", "node_h"}``; ``cut`` counts nodes left out over
        :data:`MAX_NODES`.
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
    by_layer: dict[int, list[str]] = defaultdict(list)
    for node_id in by_id:
        by_layer[layer[node_id]].append(node_id)
    slot: dict[str, float] = {}
    for depth in sorted(by_layer):

        def rank(node_id: str) -> tuple[float, str]:
            above = [slot[p] for p in parents[node_id] if p in slot]
            return (sum(above) / len(above) if above else 0.0, by_id[node_id].label)

        for i, node_id in enumerate(sorted(by_layer[depth], key=rank)):
            slot[node_id] = float(i)
    # Top to bottom: a layer per row, so a long chain scrolls down the page, not sideways.
    pos = {
        i: (PAD + int(slot[i]) * (NODE_W + GAP_X), PAD + layer[i] * (NODE_H + GAP_Y)) for i in by_id
    }
    placed = [
        {"node": by_id[i], "x": pos[i][0], "y": pos[i][1], "short": _short(by_id[i].label)}
        for i in by_id
    ]
    curves = [{"parent": p, "child": c, "path": _curve(pos[p], pos[c])} for p, c in links]
    widest = max((len(v) for v in by_layer.values()), default=0)
    width = PAD * 2 + widest * (NODE_W + GAP_X)  # the last column keeps a gap for bulges
    height = PAD * 2 + (max(layer.values(), default=-1) + 1) * (NODE_H + GAP_Y) - GAP_Y
    return {
        "nodes": placed,
        "edges": curves,
        "width": width,
        "height": height,
        "cut": cut,
        "node_w": NODE_W,
        "node_h": NODE_H,
    }
