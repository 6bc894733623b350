"""Volcano object rendering that needs no cluster: names, quantities, queues, YAML.

Pure functions (no Kubernetes client), shared by the executor and the dry-run exports.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import yaml

_MANAGED = "app.kubernetes.io/managed-by"


class _NoAliases(yaml.SafeDumper):
    """Writes repeated objects out in full: kubectl users read manifests, not anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def k8s_name(job_id: str, name: str, attempt: int) -> str:
    """A DNS-1123 Job name from the job name, the id's random tail and the attempt number."""
    short = re.sub(r"[^a-z0-9-]", "", job_id.rsplit("_", 1)[-1].lower())[:8] or "x"
    base = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-") or "job"
    # Pods are named <job>-worker-<index> and that must stay a 63-character DNS label.
    base = base[: 45 - len(short) - len(str(attempt))].rstrip("-")
    return f"{base}-{short}-{attempt}"


def priority_class_name(priority: int) -> str | None:
    """The PriorityClass for an aifab priority (``None`` for 0: the cluster default)."""
    if priority == 0:
        return None
    return f"aifab-p{priority}" if priority > 0 else f"aifab-pm{-priority}"


def render_priority_class(priority: int) -> dict[str, Any]:
    """A ``scheduling.k8s.io/v1`` PriorityClass named by :func:`priority_class_name`."""
    name = priority_class_name(priority) or "aifab-p0"
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": priority,
        "globalDefault": False,
        "description": f"aifab job priority {priority}",
    }


def resource_list(cpu: float | None, memory_mb: float | None, gpu: int | None) -> dict[str, str]:
    """Kubernetes quantities: cpu ``"2"``/``"500m"``, memory ``"<n>Mi"``, ``nvidia.com/gpu``."""
    out: dict[str, str] = {}
    if cpu is not None and math.isfinite(cpu):
        out["cpu"] = str(int(cpu)) if float(cpu).is_integer() else f"{math.ceil(cpu * 1000)}m"
    if memory_mb is not None and math.isfinite(memory_mb):
        out["memory"] = f"{math.ceil(memory_mb)}Mi"
    if gpu:
        out["nvidia.com/gpu"] = str(int(gpu))
    return out


def to_yaml(*manifests: Mapping[str, Any]) -> str:
    """Manifests as a YAML stream (``---`` between them), as ``kubectl apply -f`` takes them."""
    return yaml.dump_all([dict(m) for m in manifests], Dumper=_NoAliases, sort_keys=False)


def render_queue(
    queue: str | Mapping[str, Any] | Any,
    *,
    weight: float | None = None,
    capability: Mapping[str, Any] | None = None,
    reclaimable: bool | None = None,
) -> dict[str, Any]:
    """A ``scheduling.volcano.sh/v1beta1`` Queue for an aifab queue.

    Args:
        queue: a queue name, a queue dict (``aifab.jobs.service.list_queues``) or a ``QueueRow``.
        weight: overrides the queue's; Volcano weights are whole numbers >= 1 (rounded).
        capability: overrides the queue's, as ``{"cpu", "memory_mb", "gpu"}`` (missing: unlimited).
        reclaimable: overrides the queue's.
    """
    if isinstance(queue, str):
        fields: dict[str, Any] = {"name": queue}
    elif isinstance(queue, Mapping):
        fields = dict(queue)
    else:
        fields = {k: getattr(queue, k) for k in ("name", "weight", "capability", "reclaimable")}
    w = weight if weight is not None else float(fields.get("weight") or 1.0)
    cap = capability if capability is not None else fields.get("capability")
    rec = reclaimable if reclaimable is not None else bool(fields.get("reclaimable", True))
    spec: dict[str, Any] = {"weight": max(1, round(w)), "reclaimable": rec}
    if cap:
        spec["capability"] = resource_list(cap.get("cpu"), cap.get("memory_mb"), cap.get("gpu"))
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": str(fields["name"]), "labels": {_MANAGED: "aifab"}},
        "spec": spec,
    }
