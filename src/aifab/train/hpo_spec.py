"""The sweep spec (``aifab train RECIPE --sweep sweep.yaml``), its checks, and sweep results.

A spec names the metric and goal, the searched recipe-config keys with their ranges or choices,
the trial budget, parallelism, sampler and pruner. Imports no optuna at module level.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from aifab.core.config import StrictConfig
from aifab.core.errors import InvalidInputError

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

_SCALAR = (str, int, float, bool, type(None))

__all__ = [
    "MetricSpec",
    "ParamSpec",
    "SweepResult",
    "SweepSpec",
    "TrialResult",
    "check_params",
    "default_study_name",
    "trial_config",
]


class MetricSpec(StrictConfig):
    """The metric a sweep optimizes (an evaluation metric name the recipe logs)."""

    name: str = Field(..., min_length=1, description="Evaluation metric name, e.g. valid_accuracy.")
    goal: Literal["maximize", "minimize"] = Field("maximize", description="Direction.")


class ParamSpec(StrictConfig):
    """One searched parameter: a float or int range, or a list of choices."""

    type: Literal["float", "int", "categorical"]
    low: float | None = Field(None, description="Range start (float, int).")
    high: float | None = Field(None, description="Range end, inclusive (float, int).")
    log: bool = Field(False, description="Sample on a log scale (low must be > 0).")
    step: float | None = Field(None, gt=0, description="Grid step of the range.")
    choices: list[Any] | None = Field(None, min_length=1, description="Values (categorical).")

    @model_validator(mode="after")
    def _shape(self) -> ParamSpec:
        if self.type == "categorical":
            if self.choices is None:
                raise ValueError("categorical needs 'choices'")
            if self.low is not None or self.high is not None or self.log or self.step:
                raise ValueError("categorical takes only 'choices'")
            return self
        if self.choices is not None:
            raise ValueError(f"'choices' goes with type categorical, not {self.type}")
        if self.low is None or self.high is None:
            raise ValueError(f"{self.type} needs 'low' and 'high'")
        if self.low > self.high:
            raise ValueError(f"low ({self.low:g}) is above high ({self.high:g})")
        if self.log and (self.low <= 0 or self.step):
            raise ValueError("log needs low > 0 and no step")
        if self.type == "int" and not all(float(v).is_integer() for v in self._bounds()):
            raise ValueError("int needs whole low, high and step")
        return self

    def _bounds(self) -> list[float]:
        return [v for v in (self.low, self.high, self.step) if v is not None]

    @property
    def _encoded(self) -> bool:
        # Optuna stores only scalar choices: lists and mappings travel as JSON text.
        return not all(isinstance(c, _SCALAR) for c in self.choices or [])

    def distribution(self) -> BaseDistribution:
        """The Optuna distribution sampled for this parameter."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        if self.type == "categorical":
            choices = self.choices or []
            return CategoricalDistribution(
                [json.dumps(c) for c in choices] if self._encoded else choices
            )
        low, high = float(self.low or 0), float(self.high or 0)
        if self.type == "int":
            step = int(self.step or 1)
            return IntDistribution(int(low), int(high), log=self.log, step=step)
        return FloatDistribution(low, high, log=self.log, step=self.step)

    def decode(self, value: Any) -> Any:
        """A sampled value as the recipe config takes it."""
        return json.loads(value) if self._encoded and isinstance(value, str) else value

    def corners(self) -> list[Any]:
        """Values that cover this parameter's kinds of input (checked before a sweep)."""
        if self.type == "categorical":
            return list(self.choices or [])
        cast = int if self.type == "int" else float
        return [cast(self.low or 0), cast(self.high or 0)]


class SweepSpec(StrictConfig):
    """``aifab train RECIPE --sweep sweep.yaml``: what to search and how."""

    metric: MetricSpec
    params: dict[str, ParamSpec] = Field(
        ..., min_length=1, description="Dotted recipe-config key -> its search space."
    )
    trials: int = Field(20, ge=1, le=10000, description="Trials in the study (a rerun resumes).")
    parallel: int = Field(1, ge=1, le=256, description="Trials running at once.")
    sampler: Literal["tpe", "random"] = Field("tpe", description="How points are chosen.")
    seed: int = Field(0, description="Sampler seed.")
    random_trials: int | None = Field(
        None, ge=1, description="tpe: random trials first (default trials/3, 2..10)."
    )
    pruner: Literal["median", "none"] = Field("median", description="Stop weak trials early.")
    warmup_steps: int = Field(0, ge=0, description="Steps a trial runs before it may be pruned.")
    startup_trials: int = Field(5, ge=0, description="Completed trials before pruning starts.")
    max_failures: int | None = Field(
        5, ge=1, description="Stop launching trials after this many fail in a row (null: never)."
    )
    study: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][\w.\-:]{0,127}$",
        description="Study name (default: recipe + digest of config and search space).",
    )

    @field_validator("params")
    @classmethod
    def _keys(cls, v: dict[str, ParamSpec]) -> dict[str, ParamSpec]:
        for key in v:
            if not all(part.strip() for part in key.split(".")):
                raise ValueError(f"{key!r} is not a dotted config key (e.g. optim.lr)")
        return v

    def pruner_settings(self) -> dict[str, Any]:
        """Stored with the study so each trial job rebuilds the same pruner."""
        return {
            "kind": self.pruner,
            "warmup_steps": self.warmup_steps,
            "startup_trials": self.startup_trials,
        }


@dataclass(frozen=True)
class TrialResult:
    """One finished trial: state COMPLETE, PRUNED or FAIL (``reason`` says why)."""

    number: int
    state: str
    value: float | None
    params: dict[str, Any]
    job_id: str | None = None
    run_id: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep.

    ``best_*`` are None when no trial completed; ``stopped`` says why the sweep ended before
    ``trials`` (too many failures in a row).
    """

    study: str
    metric: str
    goal: str
    best_trial: int | None
    best_value: float | None
    best_params: dict[str, Any]
    best_job_id: str | None
    best_run_id: str | None
    trials: list[TrialResult] = field(default_factory=list)
    stopped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def default_study_name(recipe: str, base_config: Mapping[str, Any], spec: SweepSpec) -> str:
    """``<recipe>-<digest>``: the same sweep of the same config resumes the same study."""
    identity = {
        "recipe": recipe,
        "config": base_config,
        "metric": spec.metric.model_dump(),
        "params": {k: p.model_dump() for k, p in spec.params.items()},
    }
    text = json.dumps(identity, sort_keys=True, default=str)
    return f"{recipe}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def _with_params(base: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``base`` with each dotted key set (missing mappings created)."""
    from aifab.train.submit import set_dotted

    out: dict[str, Any] = json.loads(json.dumps(base, default=str))
    for key, value in values.items():
        try:
            set_dotted(out, key.split("."), value)
        except InvalidInputError as exc:
            raise InvalidInputError(f"{key}: {exc.message} in the config") from None
    return out


def trial_config(
    recipe: str, base: Mapping[str, Any], values: Mapping[str, Any], *, check_inputs: bool = False
) -> dict[str, Any]:
    """The recipe config of one trial (``values`` set on ``base``), validated, defaults filled.

    Raises:
        InvalidInputError: the config rejects a value or key (named).
    """
    from aifab.train.submit import validate_recipe_config

    cfg = validate_recipe_config(recipe, _with_params(base, values), check_inputs=check_inputs)
    return cfg.model_dump(mode="json", by_alias=True)


def check_params(recipe: str, base: Mapping[str, Any], spec: SweepSpec) -> None:
    """Reject a search space the recipe config cannot take, before any trial runs.

    Each range end and each choice is tried once; the recipe's input checks run once.

    Raises:
        InvalidInputError: the failing point and the config's message.
    """
    first = {k: p.corners()[0] for k, p in spec.params.items()}
    points = [first]
    for key, param in spec.params.items():
        points += [{**first, key: value} for value in param.corners()[1:]]
    for i, values in enumerate(points):
        try:
            trial_config(recipe, base, values, check_inputs=i == 0)
        except InvalidInputError as exc:
            shown = ", ".join(f"{k}={v!r}" for k, v in values.items())
            raise InvalidInputError(f"sweep params ({shown}): {exc.message}") from None
