"""Pipeline files (``PipelineSpec``) and the contract between the runner and its step types.

A step type is a function ``(StepContext, params) -> PreparedStep``: it validates its ``with``
parameters, resolves what it will read, and returns a ``run`` callable. The runner fingerprints
the declared inputs to decide whether the step can be skipped, then calls ``run`` if not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from aifab.core.config import StrictConfig, load_yaml
from aifab.core.errors import InvalidInputError
from aifab.core.ids import digest, file_digest
from aifab.data.catalog import VersionInfo, resolve
from aifab.data.engines import Engine
from aifab.data.refs import parse_ref

M = TypeVar("M", bound=BaseModel)

_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$"


class StepSpec(StrictConfig):
    """One step of a pipeline: a unique name, the step type it ``uses``, and its parameters."""

    model_config = ConfigDict(populate_by_name=True)

    name: str = Field(pattern=_NAME_PATTERN, description="Step name, unique in the pipeline.")
    uses: str = Field(description="Registered step type: ingest, clean, validate, label, ...")
    with_: dict[str, Any] = Field(
        default_factory=dict,
        alias="with",
        description="Parameters of the step type; relative paths resolve against the file's dir.",
    )

    @field_validator("with_", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value


class PipelineSpec(StrictConfig):
    """A pipeline file: a name and the steps it runs, in order."""

    name: str = Field(pattern=_NAME_PATTERN, description="Pipeline name (keys its run history).")
    description: str = Field("", description="What the pipeline does.")
    steps: list[StepSpec] = Field(min_length=1, description="Steps, run top to bottom.")
    engine: Engine | None = Field(
        None,
        description="Engine of every data step whose spec names none: duckdb or ray (Ray "
        "Data, for tables beyond one node). A step's own spec `engine` wins.",
    )

    @field_validator("steps")
    @classmethod
    def _unique_names(cls, steps: list[StepSpec]) -> list[StepSpec]:
        seen: set[str] = set()
        for step in steps:
            if step.name in seen:
                raise ValueError(f"step name {step.name!r} is used twice")
            seen.add(step.name)
        return steps


def load_pipeline(path: Path, source: str | None = None) -> PipelineSpec:
    """Read a pipeline file; errors name the file and the step (by name) at fault."""
    source = source or str(path)
    data = load_yaml(path)
    if not isinstance(data, Mapping):
        raise InvalidInputError(f"{source}: expected a mapping with 'name' and 'steps'")
    try:
        return PipelineSpec.model_validate(data)
    except ValidationError as exc:
        raw_steps = data.get("steps")
        names = (
            [s.get("name") if isinstance(s, Mapping) else None for s in raw_steps or []]
            if isinstance(raw_steps, list)
            else []
        )
        parts = [_describe(err, names) for err in exc.errors()]
        raise InvalidInputError(f"{source}: " + "; ".join(parts)) from None


def _describe(err: Any, names: Sequence[Any] | None = None, prefix: str = "") -> str:
    """One pydantic error as ``PREFIX.key: message``.

    With ``names`` (the pipeline's step names), ``steps.3.key`` reads ``step 'clean': key``.
    """
    loc = [str(p) for p in err["loc"]]
    msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
    msg = msg.removeprefix("Value error, ")
    if names is not None and len(loc) >= 3 and loc[0] == "steps" and loc[1].isdigit():
        index = int(loc[1])
        name = names[index] if index < len(names) else None
        label = f"step {name!r}" if isinstance(name, str) else f"step {index + 1}"
        return f"{label}: {'.'.join(loc[2:])}: {msg}"
    return f"{'.'.join([prefix, *loc] if prefix else loc) or '(root)'}: {msg}"


def validate_params(model: type[M], params: Any, prefix: str) -> M:
    """Validate ``params`` as ``model``; errors name each key as ``PREFIX.key``."""
    try:
        return model.model_validate({} if params is None else params)
    except ValidationError as exc:
        raise InvalidInputError(
            "; ".join(_describe(e, prefix=prefix) for e in exc.errors())
        ) from None


@dataclass(frozen=True)
class StepContext:
    """What a step type may know about where it runs.

    Attributes:
        pipeline: the pipeline's name.
        step: this step's name.
        base_dir: the pipeline file's directory; relative paths in ``with`` resolve against it.
        produced: dataset name -> ``name@version`` written by earlier steps of this run, so a
            step reading ``customers_clean`` gets exactly what the ``clean`` step produced.
        step_outputs: earlier steps' recorded outputs by step name (a ``register`` step reads
            the run id of the ``train`` step it names).
        engine: the pipeline's ``engine``, for data specs that name none.
        say: where a long step reports progress (a foreground ``aifab run``'s stderr); None:
            quiet.
    """

    pipeline: str
    step: str
    base_dir: Path
    produced: Mapping[str, str] = field(default_factory=dict)
    step_outputs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    engine: str | None = None
    say: Callable[[str], None] | None = None

    def path(self, value: str | Path) -> Path:
        """Resolve a path from ``with`` against the pipeline file's directory."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p).resolve()

    def dataset(self, ref: str) -> VersionInfo:
        """Resolve a dataset reference, pinning bare names to what this run produced."""
        parsed = parse_ref(ref)
        if parsed.version is None and parsed.content_hash is None and parsed.name in self.produced:
            return resolve(self.produced[parsed.name])
        return resolve(parsed)

    def params(self, model: type[M], params: Mapping[str, Any]) -> M:
        """Validate the step's ``with`` mapping as ``model`` (errors say ``with.key: ...``)."""
        return validate_params(model, dict(params), "with")


@dataclass(frozen=True)
class StepOutputs:
    """What a step produced: dataset versions, artifact files, and details worth showing."""

    datasets: Sequence[VersionInfo] = ()
    artifacts: Sequence[Path | str] = ()
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PreparedStep:
    """A step ready to run, with the inputs it declared (fingerprinted for the cache key).

    Attributes:
        run: does the work; called only when the step is not skipped.
        datasets: dataset versions it reads.
        files: files or directories it reads (data sources and spec files).
        state: other things it reads, already fingerprinted (e.g. how many human labels).
        always_run: never skip (it reads something that cannot be fingerprinted, like a URL).
    """

    run: Callable[[], StepOutputs]
    datasets: Sequence[VersionInfo] = ()
    files: Sequence[Path] = ()
    state: Mapping[str, Any] = field(default_factory=dict)
    always_run: bool = False


StepType = Callable[[StepContext, Mapping[str, Any]], PreparedStep]

#: Files up to this size are fingerprinted by content; larger ones by size and mtime.
SMALL_FILE_BYTES = 16 << 20


def file_fingerprint(path: Path) -> dict[str, Any]:
    """Identify a file's (or directory's) content cheaply enough to check on every run."""
    if path.is_dir():
        listing = [
            (str(f.relative_to(path)), st.st_size, st.st_mtime_ns)
            for f in sorted(path.rglob("*"))
            if f.is_file() and (st := f.stat())
        ]
        return {"path": str(path), "files": len(listing), "listing": digest(listing)}
    try:
        st = path.stat()
    except FileNotFoundError:
        return {"path": str(path), "missing": True}
    if st.st_size <= SMALL_FILE_BYTES:
        return {"path": str(path), "size": st.st_size, "sha256": file_digest(path)}
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def inputs_record(params: Mapping[str, Any], prepared: PreparedStep) -> dict[str, Any]:
    """The JSON stored as a step's inputs (and digested into its cache key)."""
    return {
        "params": dict(params),
        "datasets": [{"ref": v.ref, "content_hash": v.content_hash} for v in prepared.datasets],
        "files": [file_fingerprint(f) for f in prepared.files],
        "state": dict(prepared.state),
    }


def cache_key(uses: str, inputs: Mapping[str, Any]) -> str:
    """A step's cache key: its inputs, with files known by content where their digest is.

    A file's path is left out when its content is digested, so the same pipeline run from
    another copy (the checkout's ``examples/`` and the installed wheel's) reuses the outputs
    instead of retraining and moving aliases again.
    """
    files = [
        {k: v for k, v in f.items() if k != "path"} if ("sha256" in f or "listing" in f) else f
        for f in inputs.get("files", [])
    ]
    return digest({"uses": uses, **inputs, "files": files})


def outputs_record(outputs: StepOutputs) -> dict[str, Any]:
    """The JSON stored as a step's outputs (and checked before reusing them)."""
    return {
        "datasets": [
            {"ref": v.ref, "content_hash": v.content_hash, "rows": v.num_rows}
            for v in outputs.datasets
        ],
        "artifacts": [str(a) for a in outputs.artifacts],
        "details": dict(outputs.details),
    }


def is_url(value: str) -> bool:
    """Whether ``value`` names a remote source (``http://``, ``s3://``...) rather than a path."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://", value) is not None
