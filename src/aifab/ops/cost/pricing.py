"""Pricing, pure: usage records (a job attempt, a slice of gateway traffic) -> priced entries.

Jobs pay for what they reserved while they ran (like a cloud VM): requested cores and memory
times each replica's wall time, plus GPU seconds; gateway traffic pays per 1k tokens, per
request, and for the compute time its requests held a CPU core.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from aifab.ops.cost.prices import Prices

__all__ = ["Entry", "UNASSIGNED", "day_of", "price_attempt", "price_traffic"]

#: Team or project of usage that names none.
UNASSIGNED = "-"
_MIB_PER_GIB = 1024.0


@dataclass(frozen=True)
class Entry:
    """One priced ledger entry (the fields of a ``cost_entries`` row)."""

    source_key: str
    source: str
    ts: float
    day: str
    team: str
    project: str
    model: str
    deployment: str
    ref: str
    cpu_hours: float = 0.0
    gpu_hours: float = 0.0
    memory_gb_hours: float = 0.0
    requests: int = 0
    tokens: int = 0
    cost: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """The entry as a plain dict."""
        return asdict(self)


def day_of(ts: float) -> str:
    """The UTC day ``YYYY-MM-DD`` of a timestamp."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d")


def price_attempt(attempt: dict[str, Any], job: dict[str, Any], prices: Prices) -> Entry:
    """Price one finished attempt of a job.

    Args:
        attempt: ``id``, ``finished_at`` and ``usage`` (``wall_s`` summed over replicas,
            ``gpu_s``) of the attempt.
        job: ``id``, ``team``, ``project`` and ``spec`` (its ``resources`` per replica and,
            for a recipe, ``run.config.register``: the model it trains).
        prices: the prices in force.
    """
    usage = attempt.get("usage") or {}
    spec = job.get("spec") or {}
    res = spec.get("resources") or {}
    replica_hours = max(float(usage.get("wall_s") or 0.0), 0.0) / 3600.0
    cpu_h = float(res.get("cpu", 1.0)) * replica_hours
    mem_gb_h = float(res.get("memory", 512.0)) / _MIB_PER_GIB * replica_hours
    gpu_h = max(float(usage.get("gpu_s") or 0.0), 0.0) / 3600.0
    cost = cpu_h * prices.cpu_hour + gpu_h * prices.gpu_hour + mem_gb_h * prices.memory_gb_hour
    config = (spec.get("run") or {}).get("config") or {}
    ts = float(attempt["finished_at"])
    return Entry(
        source_key=f"attempt:{attempt['id']}",
        source="job",
        ts=ts,
        day=day_of(ts),
        team=job.get("team") or UNASSIGNED,
        project=job.get("project") or UNASSIGNED,
        model=str(config.get("register") or UNASSIGNED),
        deployment=UNASSIGNED,
        ref=str(job["id"]),
        cpu_hours=cpu_h,
        gpu_hours=gpu_h,
        memory_gb_hours=mem_gb_h,
        cost=cost,
    )


def price_traffic(group: dict[str, Any], prices: Prices) -> Entry:
    """Price a slice of gateway traffic of one key, deployment, model version and day.

    Args:
        group: ``first_id``/``last_id`` (request-log ids it covers), ``ts`` (its newest
            request), ``key_id``, ``team``, ``project``, ``deployment``, ``model``,
            ``requests``, ``tokens`` and ``compute_ms`` (summed request latency).
        prices: the prices in force.
    """
    cpu_h = max(float(group["compute_ms"]), 0.0) / 3_600_000.0
    requests, tokens = int(group["requests"]), int(group["tokens"])
    cost = tokens / 1000.0 * prices.tokens_1k + requests * prices.request + cpu_h * prices.cpu_hour
    ts = float(group["ts"])
    key = f"gateway:{group['first_id']}-{group['last_id']}:{group['key_id']}:{group['deployment']}"
    return Entry(
        source_key=f"{key}:{group['model']}"[:200],
        source="gateway",
        ts=ts,
        day=day_of(ts),
        team=group.get("team") or UNASSIGNED,
        project=group.get("project") or UNASSIGNED,
        model=str(group.get("model") or UNASSIGNED),
        deployment=str(group["deployment"]),
        ref=str(group.get("key_id") or UNASSIGNED),
        cpu_hours=cpu_h,
        requests=requests,
        tokens=tokens,
        cost=cost,
    )
