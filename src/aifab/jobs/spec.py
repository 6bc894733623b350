"""JobSpec: what to run, with which resources, in which queue; validated at the edge."""

from __future__ import annotations

import re
import shlex
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from aifab.core.config import StrictConfig
from aifab.jobs.pod_spec import PodSpec
from aifab.jobs.resources import Resources

_MEM = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B?|[kmgt]i?b?)?\s*$")
_UNITS = {"": 1 / (1 << 20), "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h|d)?\s*$")
_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}
_NAME = re.compile(r"^[a-z0-9]([a-z0-9.\-_]{0,61}[a-z0-9])?$")


def parse_memory_mb(value: Any) -> float:
    """Parse ``512``, ``"512Mi"``, ``"4Gi"``, ``"2GB"`` into MiB (bare numbers are MiB)."""
    if isinstance(value, int | float):
        return float(value)
    m = _MEM.match(str(value))
    if not m:
        raise ValueError(f"cannot read memory {value!r}: use e.g. 512Mi, 4Gi or a number of MiB")
    unit = (m.group(2) or "m")[0].lower()
    return float(m.group(1)) * _UNITS[unit]


def parse_duration_s(value: Any) -> float:
    """Parse ``90``, ``"90s"``, ``"15m"``, ``"2h"`` into seconds."""
    if isinstance(value, int | float):
        return float(value)
    m = _DURATION.match(str(value))
    if not m:
        raise ValueError(f"cannot read duration {value!r}: use e.g. 90s, 15m, 2h")
    return float(m.group(1)) * _SECONDS[m.group(2)]


class ResourceSpec(StrictConfig):
    """Resources of ONE replica."""

    cpu: float = Field(1.0, gt=0, description="CPU cores (fractions allowed).")
    memory: float = Field(512.0, gt=0, description="Memory, e.g. 512Mi or 4Gi (MiB if bare).")
    gpu: int = Field(0, ge=0, description="Whole GPUs.")

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, v: Any) -> float:
        return parse_memory_mb(v)

    def to_resources(self) -> Resources:
        """As a scheduler resource vector."""
        return Resources(self.cpu, self.memory, self.gpu)


class RunSpec(StrictConfig):
    """What a replica runs: a registered recipe with its config, or a command line."""

    recipe: str | None = Field(None, description="A registered recipe name (aifab models zoo).")
    config: dict[str, Any] = Field(default_factory=dict, description="The recipe's config.")
    command: list[str] | None = Field(None, description="A command line (list or string).")

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, v: Any) -> Any:
        return shlex.split(v) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _one_of(self) -> RunSpec:
        if (self.recipe is None) == (self.command is None):
            raise ValueError("give exactly one of 'recipe' or 'command'")
        if self.command is not None and not self.command:
            raise ValueError("command is empty")
        if self.command is not None and self.config:
            raise ValueError("'config' goes with 'recipe', not with 'command'")
        return self


class JobSpec(StrictConfig):
    """A job: ``aifab job submit job.yaml`` validates its file as this."""

    name: str = Field(..., description="Job name (lowercase letters, digits, '-', '_', '.').")
    run: RunSpec
    resources: ResourceSpec = Field(default_factory=ResourceSpec)
    replicas: int = Field(1, ge=1, le=1024, description="Replicas (processes) to run.")
    min_available: int | None = Field(
        None, ge=1, description="Replicas that must start together (gang); default all."
    )
    queue: str = Field("default", description="Queue to submit to.")
    priority: int = Field(0, ge=-1000, le=1000, description="Higher runs first and may preempt.")
    preemptible: bool = Field(True, description="Whether higher-priority jobs may preempt it.")
    max_retries: int = Field(0, ge=0, le=100, description="Re-runs after a failure or lost worker.")
    timeout: float | None = Field(None, gt=0, description="Kill after this long, e.g. 30m.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    workdir: str | None = Field(None, description="Working directory (default: the submitter's).")
    executor: Literal["local", "ray", "volcano"] = Field("local", description="Where it runs.")
    pod: PodSpec = Field(
        default_factory=PodSpec,
        description="Cluster settings of the pods (Volcano): image, env from Secrets, volumes, "
        "node selector, tolerations, image pull secrets, service account.",
    )
    team: str | None = Field(None, max_length=100, description="Team charged for it (budgets).")
    project: str | None = Field(None, max_length=100, description="Project charged for it.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.fullmatch(v):
            raise ValueError("use 1-63 lowercase letters, digits, '-', '_' or '.'")
        return v

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, v: Any) -> Any:
        return None if v is None else parse_duration_s(v)

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, v: Any) -> Any:
        return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else v

    @model_validator(mode="after")
    def _gang(self) -> JobSpec:
        if self.min_available is not None and self.min_available > self.replicas:
            raise ValueError(
                f"min_available ({self.min_available}) exceeds replicas ({self.replicas})"
            )
        return self

    @property
    def gang(self) -> int:
        """Replicas that start together."""
        return self.min_available or self.replicas
