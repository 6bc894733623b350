"""A monitor's configuration: the window, drift tests and thresholds, quality and objectives."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from aifab.core.config import StrictConfig
from aifab.ops.alert_rules import DEFAULT_REPEAT_INTERVAL_S

__all__ = ["DriftSpec", "MonitorSpec", "ObjectiveSpec", "QualitySpec", "RuleSpec", "SinkSpec"]


class DriftSpec(StrictConfig):
    """Data and prediction drift against the reference the model was trained on."""

    enabled: bool = Field(True, description="Compute data drift.")
    tests: list[str] = Field(["auto"], description="Drift tests per column (auto, psi, ks, ...).")
    thresholds: dict[str, float] = Field({}, description="Per-test thresholds.")
    feature_thresholds: dict[str, dict[str, float]] = Field(
        {}, description="Per-column, per-test thresholds."
    )
    kinds: dict[str, str] = Field({}, description="Column kinds overriding inference.")
    drift_share: float = Field(0.5, gt=0, le=1, description="Share of drifted columns = drift.")
    reference: str | None = Field(
        None, description="Dataset ref to compare with (default: the model's training data)."
    )
    reference_split: str | None = Field(
        "train", description="Keep reference rows whose 'split' column has this value."
    )
    reference_rows: int = Field(200_000, ge=1, description="At most this many reference rows.")
    prediction: bool = Field(
        True, description="Compare predicted classes with the model's on its reference rows."
    )
    text_tests: list[Literal["domain_classifier", "descriptors"]] = Field(
        ["domain_classifier", "descriptors"],
        description="Text columns: TF-IDF domain classifier (AUC) and/or descriptors "
        "(length, out-of-vocabulary and non-letter shares through `tests`).",
    )
    embedding_tests: list[Literal["mean_distance", "domain_classifier"]] = Field(
        ["mean_distance", "domain_classifier"],
        description="Embedding columns: distance of mean vectors and/or a domain classifier.",
    )
    embedding_distance: Literal["cosine", "euclidean"] = Field(
        "cosine", description="Distance of mean vectors (mean_distance)."
    )
    embed_text: list[str] = Field(
        [],
        description="Text columns also embedded with embedding_model and compared as the "
        "embedding column '<column>:embedding'.",
    )
    embedding_model: str = Field(
        "builtin:all-minilm-l6-v2", description="Local embedding model for embed_text."
    )
    embed_rows: int = Field(500, ge=20, description="Texts per side embedded at most.")
    text_rows: int = Field(
        2000, ge=20, description="Texts or vectors per side the text/embedding tests read."
    )
    top_words: int = Field(10, ge=0, description="Telling words reported per side of a text.")


class QualitySpec(StrictConfig):
    """Accuracy on requests whose labels arrived through feedback."""

    min_accuracy: float | None = Field(None, ge=0, le=1, description="Alert below this accuracy.")
    min_labels: int = Field(20, ge=1, description="Labels needed before quality is judged.")


class ObjectiveSpec(StrictConfig):
    """Service objectives read from the request log."""

    latency_p99_ms: float | None = Field(None, gt=0, description="p99 latency objective (ms).")
    error_rate: float | None = Field(None, ge=0, le=1, description="Share of 5xx answers allowed.")


class RuleSpec(StrictConfig):
    """An extra alert rule on one value of a monitor result."""

    name: str = Field(description="Rule name (alerts are de-duplicated per rule and monitor).")
    value: str = Field(description="A result value: drift_share, accuracy, latency_p99_ms, ...")
    op: Literal[">", ">=", "<", "<="] = Field(">=", description="Comparison with threshold.")
    threshold: float = Field(description="Where the rule fires.")
    severity: Literal["info", "warning", "critical"] = Field("warning", description="Severity.")


class SinkSpec(StrictConfig):
    """Where this monitor's alerts go."""

    type: str = Field("log", description="Sink type: log | webhook.")
    url: str | None = Field(None, description="Webhook URL.")
    secret_env: str | None = Field(None, description="Env variable holding the HMAC secret.")
    timeout_s: float = Field(5.0, gt=0, description="Webhook timeout per try.")
    retries: int = Field(3, ge=0, le=10, description="Extra tries after a failure.")
    backoff_s: float = Field(0.5, ge=0, description="First wait between tries (doubles).")

    @model_validator(mode="after")
    def _webhook_has_url(self) -> SinkSpec:
        if self.type == "webhook" and not (self.url or "").startswith(("http://", "https://")):
            raise ValueError("a webhook sink needs url: http(s)://...")
        return self


class MonitorSpec(StrictConfig):
    """What one monitor watches on one deployment."""

    deployment: str = Field(description="The deployment whose request log is watched.")
    window_s: float = Field(3600.0, gt=0, description="Seconds of request log per run.")
    min_rows: int = Field(30, ge=1, description="Fewer logged rows than this: no_data.")
    features: list[str] | None = Field(None, description="Columns to compare (default: all).")
    drift: DriftSpec = Field(default_factory=DriftSpec)
    quality: QualitySpec = Field(default_factory=QualitySpec)
    objectives: ObjectiveSpec = Field(default_factory=ObjectiveSpec)
    rules: list[RuleSpec] = Field([], description="Extra alert rules.")
    sinks: list[SinkSpec] = Field(
        [SinkSpec()],
        description="Where alerts go (default: the log).",
    )
    repeat_interval_s: float | None = Field(
        DEFAULT_REPEAT_INTERVAL_S,
        gt=0,
        description="Re-send a still-firing alert after this long (null: never).",
    )
    repeat_intervals: dict[str, float] = Field(
        {}, description="Per rule name: its own repeat interval in seconds."
    )

    @model_validator(mode="after")
    def _positive_intervals(self) -> MonitorSpec:
        bad = sorted(rule for rule, secs in self.repeat_intervals.items() if not secs > 0)
        if bad:
            raise ValueError(f"repeat_intervals: {bad[0]!r} needs a number of seconds > 0")
        return self

    @model_validator(mode="after")
    def _known_tests(self) -> MonitorSpec:
        from aifab.ops.drift import KINDS
        from aifab.ops.drift.embedding import EMBEDDING_TESTS
        from aifab.ops.drift.stat_tests import DRIFT_TESTS
        from aifab.ops.drift.text import TEXT_TESTS

        names = {*self.drift.tests, *self.drift.thresholds}
        for per in self.drift.feature_thresholds.values():
            names.update(per)
        known = {"auto", *DRIFT_TESTS.names(), *TEXT_TESTS, *EMBEDDING_TESTS}
        bad = sorted(n for n in names if n not in known)
        if bad:
            raise ValueError(f"drift: unknown test(s) {', '.join(bad)}")
        bad_kinds = sorted(f"{c}: {k!r}" for c, k in self.drift.kinds.items() if k not in KINDS)
        if bad_kinds:
            raise ValueError(f"drift.kinds: {bad_kinds[0]} is not one of {', '.join(KINDS)}")
        from aifab.ops.sinks import SINKS

        for sink in self.sinks:
            if sink.type not in SINKS:
                raise ValueError(f"sinks: unknown type {sink.type!r} (known: log, webhook)")
        return self
