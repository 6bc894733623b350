"""Pipeline steps of operations: ``monitor`` runs a monitor, ``gate`` judges a candidate model.

Both always run (they read live traffic and the registry, which no fingerprint sees). A
``gate`` that fails fails its step, so later steps (a ``deploy``) do not run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from aifab.core.config import StrictConfig
from aifab.core.errors import AifabError, InvalidInputError, NotFoundError
from aifab.ops.policy.spec import GateSpec
from aifab.pipeline.spec import PreparedStep, StepContext, StepOutputs


class MonitorParams(StrictConfig):
    """``with`` of a ``monitor`` step."""

    name: str = Field(description="The monitor to run.")
    spec: str | dict[str, Any] | None = Field(
        None, description="Create the monitor from this spec (file or mapping) if it is missing."
    )
    fail_on_breach: bool = Field(False, description="Fail the step when a rule is breached.")


def monitor(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Run a monitor over its window (creating it first from ``spec`` when missing)."""
    p = ctx.params(MonitorParams, params)
    spec = str(ctx.path(p.spec)) if isinstance(p.spec, str) else p.spec

    def run() -> StepOutputs:
        from aifab.ops import create_monitor, get_monitor, run_monitor

        try:
            get_monitor(p.name)
        except NotFoundError:
            if spec is None:
                raise
            create_monitor(p.name, spec)
        result = run_monitor(p.name)
        if p.fail_on_breach and result["status"] == "breach":
            rules = ", ".join(b["rule"] for b in result["report"]["breaches"])
            raise AifabError(f"monitor {p.name}: breached {rules}")
        details = {"status": result["status"], **result["values"]}
        return StepOutputs(details={k: v for k, v in details.items() if v is not None})

    return PreparedStep(run=run, always_run=True)


class GateParams(GateSpec):
    """``with`` of a ``gate`` step: a candidate, the champion, and the gate's criteria."""

    candidate: str | None = Field(None, description="NAME@VERSION to judge.")
    from_step: str | None = Field(
        None, alias="from", description="A register step whose new version to judge."
    )
    champion: str = Field(description="NAME@ALIAS (or version) it must not fall behind.")

    @model_validator(mode="after")
    def _one_candidate(self) -> GateParams:
        if (self.candidate is None) == (self.from_step is None):
            raise ValueError("give exactly one of 'candidate' and 'from'")
        return self


def gate(ctx: StepContext, params: Mapping[str, Any]) -> PreparedStep:
    """Judge a candidate against the champion on hold-out rows; fail the step if it fails."""
    p = ctx.params(GateParams, params)

    def run() -> StepOutputs:
        from aifab.ops.gate import evaluate_gate

        candidate = p.candidate
        if candidate is None:
            earlier = ctx.step_outputs.get(p.from_step or "") or {}
            candidate = earlier.get("details", {}).get("model")
            if not candidate:
                raise InvalidInputError(f"with.from: step {p.from_step!r} registered no model")
        spec = GateSpec.model_validate(p.model_dump(exclude={"candidate", "from_step", "champion"}))
        result, basis = evaluate_gate(str(candidate), p.champion, spec)
        if not result.passed:
            failed = "; ".join(f"{c.name}: {c.detail}" for c in result.checks if not c.passed)
            raise AifabError(f"gate failed for {candidate}: {failed or basis.get('error')}")
        checks = {c.name: c.detail for c in result.checks}
        return StepOutputs(details={"model": candidate, "passed": True, **checks})

    return PreparedStep(run=run, always_run=True)
