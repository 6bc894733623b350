"""The closed loop's decisions as pure functions over plain records (tested alone).

Whether an alert triggers retraining (and cool-downs), whether a candidate passes the gate,
what to do with a canary, and the rule that nothing is promoted without a passed gate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "Check",
    "GateResult",
    "Quality",
    "canary_decision",
    "gate",
    "may_promote",
    "trigger",
]


@dataclass(frozen=True)
class Check:
    """One gate criterion and how the candidate did."""

    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class GateResult:
    """All gate checks; passed only if every one passed (and there was at least one)."""

    checks: tuple[Check, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        """True when there are checks and all passed."""
        return bool(self.checks) and all(c.passed for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form for the history record."""
        return {"passed": self.passed, "checks": [c.__dict__ for c in self.checks]}


def trigger(
    alerts: Sequence[Mapping[str, Any]],
    rules: Sequence[str],
    *,
    last_started_at: float | None,
    cooldown_s: float,
    now: float,
) -> tuple[bool, str]:
    """Whether firing ``alerts`` (unsilenced, of one of ``rules``) start a retraining now."""
    hits = [a for a in alerts if a["state"] == "firing" and a["rule"] in rules]
    live = [a for a in hits if not a.get("silenced")]
    if not live:
        why = "only silenced alerts" if hits else "no firing alert of " + ", ".join(rules)
        return False, why
    if last_started_at is not None and now - last_started_at < cooldown_s:
        left = cooldown_s - (now - last_started_at)
        return (
            False,
            f"cool-down: last retraining {now - last_started_at:.0f} s ago ({left:.0f} s left)",
        )
    names = ", ".join(sorted({a["rule"] for a in live}))
    return True, f"alert(s) {names} firing"


def _accuracy_check(
    name: str,
    champion: Mapping[str, float] | None,
    candidate: Mapping[str, float],
    tolerance: float,
) -> Check:
    acc = candidate.get("accuracy")
    if acc is None:
        return Check(name, False, "candidate could not be evaluated")
    if champion is None or champion.get("accuracy") is None:
        return Check(name, True, f"{acc:.4f} (no champion to compare)")
    floor = champion["accuracy"] - tolerance
    return Check(
        name,
        acc >= floor,
        f"{acc:.4f} vs champion {champion['accuracy']:.4f} - {tolerance:g} = {floor:.4f}",
    )


def gate(
    champion: Mapping[str, float] | None,
    candidate: Mapping[str, float],
    *,
    tolerance: float,
    fairness: Mapping[str, float | None] | None = None,
    latency_p99_ms: float | None = None,
    traffic: tuple[Mapping[str, float] | None, Mapping[str, float]] | None = None,
) -> GateResult:
    """Judge a candidate's hold-out measures against the champion's and the bounds.

    Args:
        champion: the champion's measures (``accuracy``) on the same rows; None: no champion,
            the candidate only has to meet the bounds.
        candidate: ``accuracy``, and when measured ``demographic_parity_difference``,
            ``equalized_odds_difference``, ``latency_p99_ms``.
        tolerance: how far accuracy may fall below the champion's.
        fairness: ``{"demographic_parity_difference": max, "equalized_odds_difference": max}``.
        latency_p99_ms: the p99 latency objective.
        traffic: (champion, candidate) measures on recent labelled traffic, judged like the
            hold-out (check ``accuracy_recent_traffic``); None: not enough labels, not judged.
    """
    checks = [_accuracy_check("accuracy", champion, candidate, tolerance)]
    if traffic is not None:
        checks.append(_accuracy_check("accuracy_recent_traffic", *traffic, tolerance))
    for name, bound in (fairness or {}).items():
        if bound is None:
            continue
        value = candidate.get(name)
        ok = value is not None and value <= bound
        shown = "not measured" if value is None else f"{value:.4f}"
        checks.append(Check(name, ok, f"{shown} <= {bound:g}"))
    if latency_p99_ms is not None:
        p99 = candidate.get("latency_p99_ms")
        ok = p99 is not None and p99 <= latency_p99_ms
        shown = "not measured" if p99 is None else f"{p99:.2f} ms"
        checks.append(Check("latency_p99_ms", ok, f"{shown} <= {latency_p99_ms:g} ms"))
    return GateResult(tuple(checks))


@dataclass(frozen=True)
class Quality:
    """Labelled accuracy of the canary and of the primary over the requests each served."""

    canary: float | None
    canary_labels: int
    primary: float | None
    primary_labels: int
    min_labels: int
    tolerance: float

    def breached(self) -> str | None:
        """Why the canary is worse than the primary beyond tolerance, or None."""
        if min(self.canary_labels, self.primary_labels) < self.min_labels:
            return None
        if self.canary is None or self.primary is None:
            return None
        if self.canary >= self.primary - self.tolerance:
            return None
        return (
            f"canary accuracy {self.canary:.3f} over {self.canary_labels} labels < primary "
            f"{self.primary:.3f} over {self.primary_labels} - {self.tolerance:g}"
        )


Canary = Literal["wait", "promote", "rollback"]


def canary_decision(
    *,
    requests: int,
    errors: int,
    elapsed_s: float,
    window_s: float,
    min_requests: int,
    max_error_rate: float,
    max_wait_s: float,
    quality: Quality | None = None,
) -> tuple[Canary, str]:
    """What to do with a canary after ``elapsed_s`` of watching.

    It is rolled back at once when its error rate exceeds ``max_error_rate`` over enough
    requests, or when ``quality`` (labelled accuracy vs the primary's) is breached.
    """
    rate = errors / requests if requests else 0.0
    if requests >= min_requests and rate > max_error_rate:
        return "rollback", f"error rate {rate:.3f} > {max_error_rate:g} over {requests} requests"
    worse = quality.breached() if quality is not None else None
    if worse is not None:
        return "rollback", worse
    if elapsed_s < window_s:
        return "wait", f"watching ({elapsed_s:.0f}/{window_s:g} s)"
    if requests < min_requests:
        if elapsed_s >= max_wait_s:
            return (
                "rollback",
                f"only {requests} canary requests in {elapsed_s:.0f} s (< {min_requests})",
            )
        return "wait", f"waiting for traffic ({requests}/{min_requests} requests)"
    return "promote", f"error rate {rate:.3f} <= {max_error_rate:g} over {requests} requests"


def may_promote(gate_result: GateResult | None) -> bool:
    """A policy promotes only a candidate whose gate passed."""
    return gate_result is not None and gate_result.passed
