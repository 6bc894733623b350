"""Run a pipeline: steps in order, each skipped when its inputs are unchanged, all recorded.

Every run and step is a row (``PipelineRunRow``/``StepRunRow``) holding the step's fingerprinted
inputs, its outputs and a cache key; a step whose key matches the last successful run of the same
pipeline step, and whose outputs still exist, is skipped and its outputs reused.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from aifab.core.audit import record_event
from aifab.core.db import session_scope
from aifab.core.errors import AifabError, InvalidInputError, NotFoundError
from aifab.core.ids import new_id
from aifab.data.catalog import resolve
from aifab.pipeline.spec import (
    PipelineSpec,
    PreparedStep,
    StepContext,
    StepSpec,
    cache_key,
    inputs_record,
    load_pipeline,
    outputs_record,
)
from aifab.pipeline.steps import STEPS
from aifab.pipeline.tables import PipelineRunRow, StepRunRow

SUCCEEDED = "succeeded"
SKIPPED = "skipped"
FAILED = "failed"
NOT_RUN = "not_run"


@dataclass
class StepResult:
    """How one step went: its status, fingerprinted inputs, outputs and error."""

    name: str
    uses: str
    status: str
    cache_key: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return dict(self.__dict__)


@dataclass
class RunResult:
    """How a pipeline run went; ``exception`` is the failing step's error (for ``--debug``)."""

    run_id: str
    pipeline: str
    path: str
    status: str
    steps: list[StepResult]
    error: str | None = None
    exit_code: int = 0
    exception: BaseException | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """Whether every selected step succeeded or was skipped."""
        return self.status == SUCCEEDED

    def step(self, name: str) -> StepResult:
        """The result of step ``name``."""
        for s in self.steps:
            if s.name == name:
                return s
        raise NotFoundError(f"pipeline {self.pipeline!r} has no step {name!r} in this run")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        d = {k: v for k, v in self.__dict__.items() if k not in ("steps", "exception")}
        d["steps"] = [s.to_dict() for s in self.steps]
        return d


def run_pipeline(
    pipeline: Path | str | PipelineSpec,
    *,
    force: bool = False,
    only: str | None = None,
    base_dir: Path | None = None,
    say: Callable[[str], None] | None = None,
) -> RunResult:
    """Run a pipeline's steps in order, skipping those whose inputs have not changed.

    Args:
        pipeline: a pipeline YAML file, or a :class:`PipelineSpec`.
        force: run every step even if its inputs are unchanged.
        only: run just this step (it reads the latest versions of its inputs).
        base_dir: where relative paths in ``with`` resolve; default the file's directory
            (or the current directory for a spec object).
        say: called with a line as each step starts and ends, and with a long step's
            progress (``aifab run`` passes stderr); None: quiet.

    Returns:
        The run's result. A failed step does not raise: the run is marked failed, later steps
        do not run, and ``error`` names the step (``pipeline.yaml: step 'clean': ...``).

    Raises:
        InvalidInputError: the file is malformed, a step ``uses`` an unknown type, or ``only``
            names no step.
    """
    spec, source, path = _load(pipeline)
    base = (base_dir or (path.parent if path else Path.cwd())).resolve()
    for step in spec.steps:
        if step.uses not in STEPS:
            known = ", ".join(STEPS.names())
            raise InvalidInputError(
                f"{source}: step {step.name!r}: unknown step type {step.uses!r} (known: {known})"
            )
    if only is not None and only not in {s.name for s in spec.steps}:
        names = ", ".join(s.name for s in spec.steps)
        raise InvalidInputError(f"{source}: no step named {only!r} (steps: {names})")

    run = RunResult(new_id("run"), spec.name, str(path or source), "running", [])
    _start_run(run)
    try:
        _run_steps(run, spec, source, base, force, only, say)
    except BaseException as exc:  # Ctrl-C or a crash in the runner: the run row says so
        run.status, run.error = FAILED, f"{source}: interrupted ({type(exc).__name__})"
        _finish_run(run)
        raise
    _finish_run(run)
    return run


def _run_steps(
    run: RunResult,
    spec: PipelineSpec,
    source: str,
    base: Path,
    force: bool,
    only: str | None,
    say: Callable[[str], None] | None = None,
) -> None:
    """Run the selected steps in order into ``run``; stop at the first failure."""
    produced: dict[str, str] = {}
    outputs: dict[str, Mapping[str, Any]] = {}
    failed: StepResult | None = None
    for number, step in enumerate(spec.steps, 1):
        if only is not None and step.name != only:
            continue
        if failed is not None:
            run.steps.append(StepResult(step.name, step.uses, NOT_RUN))
            continue
        ctx = StepContext(
            spec.name, step.name, base, dict(produced), dict(outputs), spec.engine, say
        )
        if say is not None:
            say(f"step {number}/{len(spec.steps)} {step.name} ({step.uses}): running")
        result, exc = _run_step(run.run_id, step, ctx, force)
        if say is not None:
            say(
                f"step {number}/{len(spec.steps)} {step.name}: {result.status} "
                f"in {result.seconds:.1f} s"
            )
        run.steps.append(result)
        if result.status == FAILED:
            failed = result
            run.error = f"{source}: step {step.name!r}: {result.error}"
            run.exit_code = exc.exit_code if isinstance(exc, AifabError) else 1
            run.exception = exc
        else:
            produced.update(_produced(result.outputs))
            outputs[step.name] = result.outputs
    run.status = FAILED if failed else SUCCEEDED


def _load(pipeline: Path | str | PipelineSpec) -> tuple[PipelineSpec, str, Path | None]:
    if isinstance(pipeline, PipelineSpec):
        return pipeline, f"pipeline {pipeline.name!r}", None
    path = Path(pipeline)
    return load_pipeline(path), str(pipeline), path.resolve()


def _run_step(
    run_id: str, step: StepSpec, ctx: StepContext, force: bool
) -> tuple[StepResult, BaseException | None]:
    """Prepare, fingerprint, skip or run, and record one step."""
    started = time.time()
    result = StepResult(step.name, step.uses, "running")
    try:
        prepared: PreparedStep = STEPS.get(step.uses)(ctx, step.with_)
        result.inputs = inputs_record(step.with_, prepared)
        result.cache_key = cache_key(step.uses, result.inputs)
    except Exception as exc:  # noqa: BLE001 - any step error fails the run, recorded
        return _fail(run_id, ctx.pipeline, result, None, exc, started), exc
    cached = None if force or prepared.always_run else _cached(ctx.pipeline, result)
    if cached is not None:
        result.status, result.outputs = SKIPPED, cached
        result.seconds = time.time() - started
        _insert_step(run_id, ctx.pipeline, result, started, finished=True)
        return result, None
    row_id = _insert_step(run_id, ctx.pipeline, result, started, finished=False)
    try:
        outputs = prepared.run()
    except Exception as exc:  # noqa: BLE001 - any step error fails the run, recorded
        return _fail(run_id, ctx.pipeline, result, row_id, exc, started), exc
    result.status = SUCCEEDED
    result.outputs = outputs_record(outputs)
    result.seconds = time.time() - started
    _update_step(row_id, result)
    return result, None


def _fail(
    run_id: str,
    pipeline: str,
    result: StepResult,
    row_id: int | None,
    exc: BaseException,
    started: float,
) -> StepResult:
    result.status = FAILED
    result.error = exc.message if isinstance(exc, AifabError) else f"{type(exc).__name__}: {exc}"
    result.seconds = time.time() - started
    if row_id is None:
        _insert_step(run_id, pipeline, result, started, finished=True)
    else:
        _update_step(row_id, result)
    return result


def _cached(pipeline: str, result: StepResult) -> dict[str, Any] | None:
    """The outputs of the last successful run of this step, if its key matches and they exist."""
    with session_scope() as s:
        last = s.scalar(
            select(StepRunRow)
            .where(
                StepRunRow.pipeline == pipeline,
                StepRunRow.step == result.name,
                StepRunRow.status.in_((SUCCEEDED, SKIPPED)),
            )
            .order_by(StepRunRow.id.desc())
            .limit(1)
        )
        if last is None or last.cache_key != result.cache_key:
            return None
        outputs = dict(last.outputs)
    return outputs if _outputs_exist(outputs) else None


def _outputs_exist(outputs: Mapping[str, Any]) -> bool:
    for ds in outputs.get("datasets", []):
        try:
            if resolve(ds["ref"]).content_hash != ds["content_hash"]:
                return False
        except NotFoundError:
            return False
    return all(Path(a).exists() for a in outputs.get("artifacts", []))


def _produced(outputs: Mapping[str, Any]) -> dict[str, str]:
    return {ds["ref"].partition("@")[0]: ds["ref"] for ds in outputs.get("datasets", [])}


def _start_run(run: RunResult) -> None:
    with session_scope() as s:
        s.add(
            PipelineRunRow(
                id=run.run_id,
                pipeline=run.pipeline,
                path=run.path,
                status=run.status,
                started_at=time.time(),
            )
        )


def _finish_run(run: RunResult) -> None:
    with session_scope() as s:
        row = s.get(PipelineRunRow, run.run_id)
        assert row is not None  # inserted by _start_run
        row.status, row.error, row.finished_at = run.status, run.error, time.time()
        record_event(
            s,
            "pipeline.run",
            f"pipeline:{run.pipeline}",
            {
                "run_id": run.run_id,
                "path": run.path,
                "status": run.status,
                "steps": {st.name: st.status for st in run.steps},
            },
        )


def _insert_step(
    run_id: str, pipeline: str, result: StepResult, started: float, *, finished: bool
) -> int:
    with session_scope() as s:
        row = StepRunRow(
            run_id=run_id,
            pipeline=pipeline,
            step=result.name,
            uses=result.uses,
            cache_key=result.cache_key,
            status=result.status,
            skipped=result.status == SKIPPED,
            inputs=result.inputs,
            outputs=result.outputs,
            error=result.error,
            started_at=started,
            finished_at=time.time() if finished else None,
        )
        s.add(row)
        s.flush()
        return row.id


def _update_step(row_id: int, result: StepResult) -> None:
    with session_scope() as s:
        row = s.get(StepRunRow, row_id)
        assert row is not None  # inserted by _insert_step
        row.status, row.outputs, row.error = result.status, result.outputs, result.error
        row.finished_at = time.time()
