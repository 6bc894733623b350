"""A pipeline as a job: the ``pipeline`` recipe runs an inline spec on whichever node gets it.

A node of a cluster (a Ray worker, a Volcano pod) sees the metadata DB and the object store but
not the submitter's files, so :func:`submit_pipeline` sends the pipeline self-contained: spec
and config files its steps name are read here and inlined, and a step that would read a local
file there (an ``ingest`` of a path) is refused before anything starts; steps read dataset
versions from the lake by name instead. The node runs it with :func:`run_pipeline`, so its
runs, steps, versions, lineage and quarantine land in the shared DB exactly as locally.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from aifab.core.config import StrictConfig, load_yaml, parse_config
from aifab.core.errors import AifabError, InvalidInputError
from aifab.pipeline.spec import PipelineSpec, is_url, load_pipeline

#: Step type -> the ``with`` key that may name a YAML file (relative to the pipeline file).
INLINED_FILES = {
    "clean": "spec",
    "validate": "spec",
    "label": "spec",
    "split": "spec",
    "features": "spec",
    "train": "config",
}


class PipelineJobConfig(StrictConfig):
    """The ``pipeline`` recipe's config: a whole pipeline, inline, and how to run it."""

    pipeline: PipelineSpec = Field(description="The pipeline, steps as in `aifab run` YAML.")
    force: bool = Field(False, description="Run every step, even those whose inputs are unchanged.")


def inline_pipeline(path: Path) -> PipelineSpec:
    """Read a pipeline file into a spec that needs no file beside it.

    Raises:
        InvalidInputError: the file is malformed, a named spec file is missing or bad, or a
            step reads a local file (only datasets, URLs and inline specs reach another node).
    """
    spec = load_pipeline(path)
    base = path.resolve().parent
    steps = []
    for step in spec.steps:
        params = dict(step.with_)
        key = INLINED_FILES.get(step.uses)
        if key is not None and isinstance(params.get(key), str):
            file = (base / Path(params[key]).expanduser()).resolve()
            params[key] = load_yaml(file)
        source = params.get("source")
        if step.uses == "ingest" and isinstance(source, str) and not is_url(source):
            raise InvalidInputError(
                f"{path}: step {step.name!r}: source {source!r} is a file on this machine, "
                "which another node cannot read: ingest it here (aifab data ingest) and let "
                "the pipeline read the dataset by name"
            )
        steps.append({"name": step.name, "uses": step.uses, "with": params})
    data = spec.model_dump(by_alias=True)
    return PipelineSpec.model_validate({**data, "steps": steps})


def submit_pipeline(
    pipeline: Path | PipelineSpec,
    *,
    executor: str = "ray",
    force: bool = False,
    queue: str = "default",
    resources: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run a pipeline as a ``pipeline`` job on ``executor`` and wait until it is final.

    Args:
        pipeline: a pipeline YAML file (its spec files are inlined) or a spec.
        executor: where the job runs: ``ray``, ``volcano`` or ``local``.
        force: run every step, even those whose inputs are unchanged.
        queue: the job's queue.
        resources: per replica (cpu, memory, gpu).

    Returns:
        ``{"job": <the final job>, "result": <what the pipeline job returned or None>}``.

    Raises:
        InvalidInputError: a malformed pipeline, or one that reads local files.
        AifabError: the job did not succeed (its state and reason are in the message).
    """
    from aifab.jobs.service import job_result, submit
    from aifab.jobs.worker import run_until_final

    spec = inline_pipeline(pipeline) if isinstance(pipeline, Path) else pipeline
    config = {"pipeline": spec.model_dump(mode="json", by_alias=True), "force": force}
    job_spec: dict[str, Any] = {
        "name": f"pipeline-{spec.name}"[:63].lower().rstrip("-_."),
        "executor": executor,
        "queue": queue,
        "run": {"recipe": "pipeline", "config": config},
    }
    if resources:
        job_spec["resources"] = dict(resources)
    job = submit(job_spec)
    final = run_until_final(job["id"], executor, cancel_on_interrupt=True)
    if final["state"] != "succeeded":
        why = _last_error(job["id"])
        raise AifabError(
            f"pipeline job {job['id']} {final['state']}: {final['reason']}"
            + (f" ({why})" if why else "")
        )
    return {"job": final, "result": job_result(job["id"])}


def _last_error(job_id: str) -> str:
    """The error a failed pipeline job's replica ended its log with ("" if none is readable)."""
    from aifab.jobs.logs import tail_log

    try:
        lines = [line for line in tail_log(job_id).text.splitlines() if line.strip()]
    except AifabError:
        return ""
    if not lines:
        return ""
    kind, sep, message = lines[-1].partition(": ")
    return message if sep and re.fullmatch(r"[\w.]+(Error|Exception)", kind) else lines[-1]


def main(config: dict[str, Any]) -> dict[str, Any]:
    """The ``pipeline`` recipe: run the inline pipeline here; fail the job if a step fails.

    Relative paths in it resolve against the working directory (a node has nothing there).
    """
    from aifab.pipeline.runner import run_pipeline

    cfg = parse_config(PipelineJobConfig, config, source="pipeline job config")
    result = run_pipeline(cfg.pipeline, force=cfg.force, base_dir=Path.cwd())
    if not result.ok:
        raise AifabError(result.error or f"pipeline {result.pipeline!r} failed")
    return {
        "run_id": result.run_id,
        "pipeline": result.pipeline,
        "status": result.status,
        "steps": {s.name: {"status": s.status, **s.outputs} for s in result.steps},
    }
