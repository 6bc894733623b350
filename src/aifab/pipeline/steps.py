"""The registry of pipeline step types, and the data-layer steps: thin adapters over services.

Each adapter validates its ``with`` parameters, resolves the datasets and files it reads (so the
runner can fingerprint them), and returns a ``run`` callable that calls one ``aifab.data``
service. Later layers add their step types to :data:`STEPS` by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator

from aifab.core.config import StrictConfig, load_yaml, parse_config
from aifab.core.errors import InvalidInputError
from aifab.core.registry import Registry, load_target
from aifab.data.catalog import VersionInfo
from aifab.pipeline.spec import PreparedStep, StepContext, StepOutputs, is_url, validate_params

#: Step type name -> ``"module:function"``; each function is a ``spec.StepType``.
STEPS = Registry(
    "pipeline step",
    {
        "ingest": "aifab.pipeline.steps:ingest",
        "clean": "aifab.pipeline.steps:clean",
        "validate": "aifab.pipeline.steps:validate",
        "label": "aifab.pipeline.steps:label",
        "split": "aifab.pipeline.steps:split",
        "features": "aifab.pipeline.steps:features",
        "train": "aifab.pipeline.train_steps:train",
        "register": "aifab.pipeline.train_steps:register",
        "deploy": "aifab.pipeline.serve_steps:deploy",
        "card": "aifab.pipeline.card_step:card",
        "kb_build": "aifab.pipeline.rag_steps:kb_build",
        "kb_eval": "aifab.pipeline.rag_steps:kb_eval",
        "prompt_eval": "aifab.pipeline.rag_steps:prompt_eval",
        "tool_eval": "aifab.pipeline.agent_steps:tool_eval",
        "agent": "aifab.pipeline.agent_steps:agent",
        "monitor": "aifab.pipeline.ops_steps:monitor",
        "gate": "aifab.pipeline.ops_steps:gate",
    },
)

_SPEC_HELP = "The service's spec: a YAML file (relative to the pipeline file) or an inline mapping."


class IngestParams(StrictConfig):
    """``with`` of an ``ingest`` step."""

    source: str = Field(description="File or directory (relative to the pipeline file) or URL.")
    output: str = Field(description="Dataset the ingested rows are committed to.")
    kind: str = Field("auto", description="Source kind; 'auto' infers it from the source.")
    options: dict[str, Any] | None = Field(None, description="IngestOptions for the source.")


class TransformParams(StrictConfig):
    """``with`` of a ``clean``, ``validate``, ``label``, ``split`` or ``features`` step."""

    input: str = Field(description="Dataset reference to read (NAME or NAME@VERSION).")
    output: str = Field(description="Dataset the result is committed to.")
    spec: str | dict[str, Any] = Field(description=_SPEC_HELP)

    @model_validator(mode="after")
    def _output_is_not_input(self) -> TransformParams:
        # Writing a new version of an unpinned input changes that input for the next run, so
        # the step (and everything after it) would never be skipped.
        if "@" not in self.input and self.input.strip() == self.output:
            raise ValueError(
                f"output {self.output!r} is the input dataset: give the result its own "
                "dataset name, or pin the input as NAME@VERSION"
            )
        return self


def _spec(ctx: StepContext, model_name: str, spec: str | dict[str, Any]) -> tuple[Any, list[Path]]:
    """Validate a service spec given inline or as a file; return it and the files it came from."""
    model: type[BaseModel] = load_target(model_name)
    if isinstance(spec, str):
        path = ctx.path(spec)
        return parse_config(model, _engine(ctx, model, load_yaml(path)), source=spec), [path]
    return validate_params(model, _engine(ctx, model, spec), "with.spec"), []


def _engine(ctx: StepContext, model: type[BaseModel], spec: Any) -> Any:
    """The spec with the pipeline's ``engine`` when it names none (a step's own wins).

    The cache key stays the step's own parameters: both engines commit the same content.
    """
    if ctx.engine is None or "engine" not in model.model_fields or not isinstance(spec, dict):
        return spec
    return {"engine": ctx.engine, **spec}


def ingest(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Ingest a file, folder or URL into the ``output`` dataset (remote sources always run)."""
    from aifab.data.ingest import IngestOptions

    p = ctx.params(IngestParams, params)
    options = validate_params(IngestOptions, p.options, "with.options") if p.options else None
    remote = is_url(p.source)
    source: str | Path = p.source if remote else ctx.path(p.source)
    # URLs, APIs and crawls read what a fingerprint of the local path cannot see.
    always = remote or p.kind in ("url", "api", "crawl")

    def run() -> StepOutputs:
        from aifab.data.ingest import ingest as ingest_service

        res = ingest_service(p.output, source, kind=p.kind, options=options)
        details = {"rows": res.rows, "rejected": res.rejected, "created": res.created}
        return StepOutputs(datasets=[res.version], details=details)

    files = [] if remote else [Path(source)]
    return PreparedStep(run=run, files=files, always_run=always)


def _transform(
    ctx: StepContext,
    params: Mapping[str, Any],
    service: str,
    model: str,
    state: Callable[[VersionInfo, str], dict[str, Any]] | None = None,
) -> PreparedStep:
    """A step that reads one dataset and commits one version through ``aifab.data.<service>``."""
    p = ctx.params(TransformParams, params)
    spec, files = _spec(ctx, model, p.spec)
    source = ctx.dataset(p.input)
    fn = load_target(service)  # by module path: ``aifab.data.label`` is also a function

    def run() -> StepOutputs:
        res = fn(source.ref, spec, output=p.output)
        return StepOutputs(datasets=[res.version], details={"created": res.created})

    extra = state(source, p.output) if state else {}
    return PreparedStep(run=run, datasets=[source], files=files, state=extra)


def clean(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Clean ``input`` with a ``CleanSpec`` into ``output``."""
    return _transform(ctx, params, "aifab.data.clean:clean", "aifab.data.clean:CleanSpec")


def label(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Label ``input`` with a ``LabelSpec`` (labeling functions) into ``output``.

    Human labels given to either dataset override the votes, so they count as an input too.
    """
    return _transform(
        ctx, params, "aifab.data.label:label", "aifab.data.label:LabelSpec", state=_human_labels
    )


def _human_labels(source: VersionInfo, output: str) -> dict[str, Any]:
    """How many human labels the step would apply, and when the newest was given or changed."""
    from sqlalchemy import func, select

    from aifab.core.db import session_scope
    from aifab.data.tables import HumanLabel

    with session_scope() as s:
        n, newest = s.execute(
            select(func.count(HumanLabel.id), func.max(HumanLabel.created_at)).where(
                HumanLabel.dataset.in_({source.dataset, output})
            )
        ).one()
    return {"human_labels": {"count": int(n), "newest": newest}}


def split(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Add a train/valid/test ``split`` column to ``input`` with a ``SplitSpec``."""
    return _transform(ctx, params, "aifab.data.splits:split", "aifab.data.splits:SplitSpec")


def validate(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Check ``input`` against an expectation suite; the passing rows go to ``output``.

    Failing rows are quarantined by the service and the pipeline goes on; the step fails when
    the suite fails (an error-level dataset rule, or more rows failing error-level rules than
    ``max_failure_share``, default 0).
    """
    p = ctx.params(TransformParams, params)
    suite, files = _spec(ctx, "aifab.data.validate:ExpectationSuite", p.spec)
    source = ctx.dataset(p.input)

    def run() -> StepOutputs:
        from aifab.data.validate import validate as validate_service

        report = validate_service(source.ref, suite, output=p.output)
        failing = {r.name: r.failed for r in report.rules if r.failed or not r.passed}
        if not report.passed:
            raise InvalidInputError(
                f"validation of {source.ref} failed: {'; '.join(report.reasons)}"
            )
        if report.version is None:
            raise InvalidInputError(
                "the suite has on_failure: report, so it keeps no passing rows for the next "
                "step; use on_failure: quarantine in a pipeline"
            )
        details = {
            "rows": report.rows,
            "failed_rows": report.failed_rows,
            "quarantined": report.quarantined,
            "failed_rules": failing,
        }
        return StepOutputs(datasets=[report.version], details=details)

    return PreparedStep(run=run, datasets=[source], files=files)


def features(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Fit a feature transform on ``input``; the transformed rows go to ``output``."""
    p = ctx.params(TransformParams, params)
    spec, files = _spec(ctx, "aifab.data.features:FeatureSpec", p.spec)
    source = ctx.dataset(p.input)

    def run() -> StepOutputs:
        from aifab.data.features import fit_features

        res = fit_features(source.ref, spec, output=p.output)
        return StepOutputs(datasets=[res.version], artifacts=[res.artifact_path])

    return PreparedStep(run=run, datasets=[source], files=files)
