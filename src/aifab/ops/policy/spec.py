"""A retrain-and-promote policy as YAML: trigger, retraining recipe, gate, canary, cool-down."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from aifab.core.config import StrictConfig
from aifab.ops.monitor_spec import SinkSpec

__all__ = [
    "CanaryQualitySpec",
    "CanarySpec",
    "GateSpec",
    "PolicySpec",
    "RecentTrafficSpec",
    "RetrainSpec",
    "TriggerSpec",
]


class TriggerSpec(StrictConfig):
    """Which alerts start the loop."""

    monitor: str = Field(description="The monitor whose alerts trigger retraining.")
    rules: list[str] = Field(
        ["data_drift", "prediction_drift", "quality"], description="Alert rules that trigger."
    )


class RetrainSpec(StrictConfig):
    """The retraining job: a declared recipe and config, on the newest training data."""

    recipe: str = Field("classify", description="Training recipe.")
    config: str | dict[str, Any] = Field(description="Recipe config: a YAML file or a mapping.")
    overrides: list[str] = Field([], description="dotted.key=value overrides.")
    queue: str = Field("default", description="Job queue.")
    timeout_s: float = Field(3600.0, gt=0, description="Give up waiting for the job after this.")


class FairnessBound(StrictConfig):
    """Fairness of the candidate over one sensitive feature (fairlearn)."""

    sensitive: str = Field(description="Sensitive column of the hold-out rows.")
    positive: str | None = Field(None, description="Positive class (default: the first class).")
    max_demographic_parity_difference: float | None = Field(None, ge=0, le=1, description="Bound.")
    max_equalized_odds_difference: float | None = Field(None, ge=0, le=1, description="Bound.")


class RecentTrafficSpec(StrictConfig):
    """Recent labelled traffic the gate scores both models on, besides the hold-out set."""

    enabled: bool = Field(True, description="Score recent labelled traffic when there is enough.")
    window_s: float = Field(7 * 86400.0, gt=0, description="Request-log rows this recent.")
    min_labels: int = Field(50, ge=1, description="Fewer labelled rows: the hold-out only.")
    max_rows: int = Field(20_000, ge=1, description="Score at most this many (the newest).")


class GateSpec(StrictConfig):
    """What a candidate must show against the champion before any client sees it."""

    holdout: str | None = Field(
        None, description="Hold-out dataset (default: the newest training data's test split)."
    )
    holdout_split: str | None = Field("test", description="Rows whose 'split' has this value.")
    tolerance: float = Field(0.02, ge=0, le=1, description="Accuracy may drop at most this much.")
    fairness: FairnessBound | None = Field(None, description="Fairness bounds.")
    latency_p99_ms: float | None = Field(None, gt=0, description="Single-row p99 objective (ms).")
    latency_calls: int = Field(50, ge=5, le=10_000, description="Calls timed for latency.")
    traffic: RecentTrafficSpec = Field(default_factory=RecentTrafficSpec)


class CanaryQualitySpec(StrictConfig):
    """Accuracy of the canary vs the primary on the labelled requests each served."""

    enabled: bool = Field(True, description="Watch quality from feedback labels.")
    min_labels: int = Field(20, ge=1, description="Labels each side needs before judging.")
    tolerance: float = Field(0.05, ge=0, le=1, description="Roll back below primary - this.")


class CanarySpec(StrictConfig):
    """The canary: a share of live traffic, watched before promotion."""

    weight: float = Field(20.0, gt=0, le=100, description="Percent of requests to the canary.")
    window_s: float = Field(60.0, gt=0, description="Watch the canary this long.")
    min_requests: int = Field(20, ge=1, description="Canary requests needed to judge it.")
    max_error_rate: float = Field(0.05, ge=0, le=1, description="Roll back above this 5xx share.")
    max_wait_s: float = Field(600.0, gt=0, description="Give up (roll back) after this long.")
    quality: CanaryQualitySpec = Field(default_factory=CanaryQualitySpec)


class PolicySpec(StrictConfig):
    """Drift or quality alert -> retrain -> gate -> canary -> promote or roll back."""

    deployment: str = Field(description="The deployment served to clients.")
    model: str = Field(description="Registered model name (its champion alias is promoted).")
    champion_alias: str = Field("champion", description="Alias clients are served through.")
    trigger: TriggerSpec
    retrain: RetrainSpec
    gate: GateSpec = Field(default_factory=GateSpec)
    canary: CanarySpec = Field(default_factory=CanarySpec)
    cooldown_s: float = Field(3600.0, ge=0, description="No new retraining sooner than this.")
    sinks: list[SinkSpec] | None = Field(
        None, description="Where failure alerts go (default: the trigger monitor's sinks)."
    )
