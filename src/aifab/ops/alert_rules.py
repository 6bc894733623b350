"""Alert rules as pure functions: which rules a monitor result breaches, and what that changes.

:func:`evaluate` turns a result's values into breaches; :func:`plan` compares breaches with the
alerts already firing and the silences in force, and says what to fire, fold, resolve or mute.
The store applies the plan; nothing here reads or writes anything.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_REPEAT_INTERVAL_S",
    "Breach",
    "Plan",
    "Rule",
    "Silence",
    "default_rules",
    "evaluate",
    "fingerprint",
    "plan",
]

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


@dataclass(frozen=True)
class Rule:
    """Fire when ``values[value] op threshold`` (a missing value never fires)."""

    name: str
    value: str
    op: str
    threshold: float
    severity: str = "warning"
    #: Only judge the rule when this value is at least ``min_count`` (e.g. labelled >= 20).
    gate_value: str | None = None
    min_count: float = 0.0


@dataclass(frozen=True)
class Breach:
    """A rule that fired on a result."""

    rule: str
    value: float
    threshold: float
    severity: str
    message: str


@dataclass(frozen=True)
class Silence:
    """Mutes alerts of ``rule`` and/or ``monitor`` (None matches any) until ``until``."""

    rule: str | None
    monitor: str | None
    until: float

    def matches(self, rule: str, monitor: str, now: float) -> bool:
        """Whether this silence mutes ``rule`` on ``monitor`` at ``now``."""
        return (
            now < self.until
            and (self.rule is None or self.rule == rule)
            and (self.monitor is None or self.monitor == monitor)
        )


def default_rules(
    *,
    quality_min: float | None,
    min_labels: int,
    latency_p99_ms: float | None,
    error_rate: float | None,
) -> list[Rule]:
    """The rules every monitor has: data drift, prediction drift, and its declared objectives."""
    rules = [
        Rule("data_drift", "dataset_drift", ">=", 1.0),
        Rule("prediction_drift", "prediction_drift", ">=", 1.0),
    ]
    if quality_min is not None:
        rules.append(
            Rule("quality", "accuracy", "<", quality_min, "critical", "labelled", min_labels)
        )
    if latency_p99_ms is not None:
        rules.append(Rule("latency", "latency_p99_ms", ">", latency_p99_ms))
    if error_rate is not None:
        rules.append(Rule("errors", "error_rate", ">", error_rate, "critical"))
    return rules


def evaluate(rules: Sequence[Rule], values: Mapping[str, float]) -> list[Breach]:
    """The rules ``values`` breach."""
    out = []
    for r in rules:
        v = values.get(r.value)
        if v is None:
            continue
        if r.gate_value is not None and values.get(r.gate_value, 0.0) < r.min_count:
            continue
        if _OPS[r.op](float(v), r.threshold):
            msg = f"{r.value} = {float(v):.4g} {r.op} {r.threshold:g}"
            out.append(Breach(r.name, float(v), r.threshold, r.severity, msg))
    return out


def fingerprint(rule: str, monitor: str) -> str:
    """The de-duplication key of an alert: one firing alert per rule and monitor."""
    return hashlib.sha256(f"{monitor}\0{rule}".encode()).hexdigest()[:32]


@dataclass
class Plan:
    """What one evaluation changes: new alerts, repeats folded into firing ones, resolutions."""

    fire: list[tuple[Breach, bool]] = field(default_factory=list)  # (breach, silenced)
    repeat: list[tuple[str, Breach]] = field(default_factory=list)  # (fingerprint, breach)
    resolve: list[str] = field(default_factory=list)  # fingerprints
    #: Firing alerts still breached whose last notice is older than their repeat interval.
    renotify: list[str] = field(default_factory=list)  # fingerprints


#: Re-send a still-firing alert after this long by default (Alertmanager's repeat_interval).
DEFAULT_REPEAT_INTERVAL_S = 4 * 3600.0


def plan(
    monitor: str,
    breaches: Sequence[Breach],
    firing: Mapping[str, str],
    silences: Sequence[Silence],
    now: float,
    *,
    judged: Sequence[str] | None = None,
    last_sent: Mapping[str, float] | None = None,
    repeat_after: Mapping[str, float | None] | None = None,
) -> Plan:
    """Compare this evaluation's breaches with the alerts firing for ``monitor``.

    Args:
        monitor: the monitor evaluated.
        breaches: rules breached now.
        firing: fingerprint -> rule name of the monitor's firing alerts.
        silences: silences in force.
        now: the time of the evaluation.
        judged: rules whose values this result had (a rule it could not judge, e.g. drift of a
            window with no traffic, neither fires nor resolves); None: every rule was judged.
        last_sent: fingerprint -> when the firing alert was last notified (fired or re-sent).
        repeat_after: rule -> seconds after which a still-breached firing alert is notified
            again (None or missing: never); a repeat sooner than that only folds into it.
    """
    out = Plan()
    seen = set()
    for b in breaches:
        fp = fingerprint(b.rule, monitor)
        seen.add(fp)
        if fp in firing:
            out.repeat.append((fp, b))
            interval = (repeat_after or {}).get(b.rule)
            sent = (last_sent or {}).get(fp)
            if interval is not None and sent is not None and now - sent >= interval:
                out.renotify.append(fp)
        else:
            muted = any(s.matches(b.rule, monitor, now) for s in silences)
            out.fire.append((b, muted))
    for fp, rule in firing.items():
        if fp not in seen and (judged is None or rule in judged):
            out.resolve.append(fp)
    return out
