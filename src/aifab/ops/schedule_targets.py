"""What a schedule's run does for each target kind: run a pipeline, a monitor, submit a job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aifab.core.registry import load_target

__all__ = ["run_monitor_target", "run_pipeline_file", "run_policy_target", "submit_job_file"]


def run_pipeline_file(path: str) -> dict[str, Any]:
    """Run the pipeline in ``path``; raise when a step failed (the run is marked failed)."""
    # Pipelines are a higher layer: reached by name, never imported by ops.
    result = load_target("aifab.pipeline.runner:run_pipeline")(Path(path))
    failed = [f"{s.name}: {s.error}" for s in result.steps if s.error]
    if failed:
        raise RuntimeError("; ".join(failed))
    return {"steps": {s.name: s.status for s in result.steps}}


def run_monitor_target(name: str) -> dict[str, Any]:
    """Run monitor ``name``; its status and values are the run's result."""
    from aifab.ops.monitors import run_monitor

    r = run_monitor(name)
    return {"status": r["status"], "values": r["values"]}


def submit_job_file(path: str) -> dict[str, Any]:
    """Submit the JobSpec in ``path``; the worker runs it like any other job."""
    from aifab.jobs import submit

    job = submit(Path(path))
    return {"job": job["id"]}


def run_policy_target(name: str) -> dict[str, Any]:
    """Evaluate retrain policy ``name``: it acts only if its alerts fire and no cool-down holds."""
    from aifab.ops.loop import run_policy

    out = run_policy(name)
    return {"outcome": out["outcome"], "why": out["why"]}
