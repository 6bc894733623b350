"""The closed loop: alert -> retrain on the newest data -> gate -> canary -> promote or roll back.

:func:`run_policy` walks the steps, records each as an audit event and writes one history record
that explains the outcome; :func:`dry_run` says what would happen and changes nothing. The
decisions are :mod:`aifab.ops.policy.retrain`'s pure functions.
"""

from __future__ import annotations

import time
from typing import Any

from aifab.core.audit import record_event
from aifab.core.db import session_scope
from aifab.core.errors import AifabError
from aifab.core.registry import load_target
from aifab.ops.policy.retrain import GateResult, Quality, canary_decision, may_promote, trigger
from aifab.ops.policy.service import _get, last_started
from aifab.ops.policy.spec import CanaryQualitySpec, PolicySpec
from aifab.ops.tables import PolicyRunRow

__all__ = ["dry_run", "run_policy"]


class _Record:
    """The one history record of a run; every step is also an audit event."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.data: dict[str, Any] = {"steps": []}
        with session_scope() as s:
            row = PolicyRunRow(policy=policy, started_at=time.time(), outcome="running", record={})
            s.add(row)
            s.flush()
            self.id = row.id

    def step(self, name: str, **detail: Any) -> None:
        self.data["steps"].append({"step": name, "at": time.time(), **detail})
        with session_scope() as s:
            record_event(s, f"policy.{name}", f"policy:{self.policy}", detail)
            row = s.get(PolicyRunRow, self.id)
            assert row is not None
            row.record = dict(self.data)

    def finish(self, outcome: str, why: str) -> dict[str, Any]:
        self.data.update(outcome=outcome, why=why)
        with session_scope() as s:
            row = s.get(PolicyRunRow, self.id)
            assert row is not None
            row.outcome, row.finished_at, row.record = outcome, time.time(), dict(self.data)
            record_event(s, "policy.finish", f"policy:{self.policy}", {"outcome": outcome})
        return {"id": self.id, "policy": self.policy, "outcome": outcome, "why": why, **self.data}


def _spec(name: str) -> PolicySpec:
    with session_scope() as s:
        return PolicySpec.model_validate(_get(s, name).spec)


def _trigger(name: str, spec: PolicySpec) -> tuple[bool, str, list[dict[str, Any]]]:
    from aifab.ops.alerts import list_alerts

    alerts = [a for a in list_alerts("firing", 1000) if a["monitor"] == spec.trigger.monitor]
    ok, why = trigger(
        alerts,
        spec.trigger.rules,
        last_started_at=last_started(name),
        cooldown_s=spec.cooldown_s,
        now=time.time(),
    )
    return ok, why, alerts


def _newest_data(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The config with every ``*dataset`` key pointed at the dataset's newest version."""
    from aifab.data.catalog import resolve

    out, pinned = dict(config), {}
    for key, value in config.items():
        if key.endswith("dataset") and isinstance(value, str) and value:
            ref = resolve(value.split("@", 1)[0]).ref
            out[key] = pinned[key] = ref
    return out, pinned


def _job_spec(name: str, spec: PolicySpec, config: dict[str, Any]) -> dict[str, Any]:
    # Training is reached by name: ops must not import train (serving imports ops).
    build = load_target("aifab.train.submit:build_job_spec")
    overrides = [*spec.retrain.overrides, f"register={spec.model}", "alias=challenger"]
    job: dict[str, Any] = build(
        spec.retrain.recipe,
        config,
        overrides,
        name=f"retrain-{name}"[:63].lower(),
        job={"queue": spec.retrain.queue},
    )
    return job


def dry_run(name: str) -> dict[str, Any]:
    """What :func:`run_policy` would do now, step by step; nothing is changed or submitted."""
    from aifab.track.registry import resolve_model

    spec = _spec(name)
    ok, why, alerts = _trigger(name, spec)
    config, pinned = _newest_data(dict(spec.retrain.config))  # type: ignore[arg-type]
    job = _job_spec(name, spec, config)
    champion = resolve_model(f"{spec.model}@{spec.champion_alias}")
    plan = [
        f"trigger: {'yes' if ok else 'no'} ({why})",
        f"retrain: submit job {job['name']} ({spec.retrain.recipe}) on {pinned or 'its data'}",
        f"register the result as {spec.model}@challenger",
        f"gate against {spec.model}@{champion['version']} ({spec.champion_alias}): accuracy >= "
        f"champion - {spec.gate.tolerance:g}"
        + (f", fairness on {spec.gate.fairness.sensitive}" if spec.gate.fairness else "")
        + (f", p99 <= {spec.gate.latency_p99_ms:g} ms" if spec.gate.latency_p99_ms else "")
        + (
            f"; also on recent labelled traffic of {spec.deployment} if >= "
            f"{spec.gate.traffic.min_labels} labels"
            if spec.gate.traffic.enabled
            else ""
        ),
        f"canary at {spec.canary.weight:g}% on {spec.deployment} for {spec.canary.window_s:g} s "
        f"(>= {spec.canary.min_requests} requests, error rate <= {spec.canary.max_error_rate:g}"
        + (
            f", labelled accuracy >= primary - {spec.canary.quality.tolerance:g}"
            if spec.canary.quality.enabled
            else ""
        )
        + ")",
        f"then promote (move {spec.model}@{spec.champion_alias}) or roll back",
    ]
    return {
        "policy": name,
        "would_trigger": ok,
        "why": why,
        "alerts": alerts,
        "data": pinned,
        "job": job,
        "champion": champion["version"],
        "plan": plan,
    }


def run_policy(name: str, *, force: bool = False) -> dict[str, Any]:
    """Run the loop once: returns the history record (``outcome`` and ``why``).

    Outcomes: ``skipped`` (no trigger, cool-down), ``failed`` (the job failed, the candidate
    cannot be evaluated or the gate crashed: an alert ``retrain_failed`` goes to the sinks),
    ``gate_failed``, ``rolled_back`` (error rate, or labelled quality below the primary's),
    ``promoted``. Clients see a change only in the last two (the canary share, then the new
    champion); a failure anywhere changes nothing they see.
    """
    spec = _spec(name)
    ok, why, alerts = _trigger(name, spec)  # before this run's own row joins the history
    rec = _Record(name)
    rec.step("trigger", fired=ok, why=why, alerts=[a["id"] for a in alerts], forced=force)
    if not ok and not force:
        return rec.finish("skipped", why)
    try:
        candidate = _retrain(name, spec, rec)
    except AifabError as exc:
        return _failed(name, spec, rec, f"retraining failed: {exc.message}")
    except Exception as exc:  # noqa: BLE001 - reported and alerted; never crashes the worker
        return _failed(name, spec, rec, f"retraining crashed: {type(exc).__name__}: {exc}")
    try:
        result, basis = _gate(spec, candidate, rec)
    except Exception as exc:  # noqa: BLE001 - a crashed gate promotes nothing; it alerts
        return _failed(name, spec, rec, f"the gate crashed: {type(exc).__name__}: {exc}")
    if "error" in basis:
        why = f"candidate {candidate} could not be evaluated: {basis['error']}"
        return _failed(name, spec, rec, why)
    _resolve_failure(name, spec)
    if not may_promote(result):
        failed = [c.name for c in result.checks if not c.passed]
        return rec.finish("gate_failed", f"gate failed ({', '.join(failed)}): nothing changed")
    return _canary(spec, candidate, rec)


#: The alert rule a failed retraining (job, candidate or gate) fires, on monitor ``policy:NAME``.
RETRAIN_FAILED = "retrain_failed"


def _sinks(spec: PolicySpec) -> list[dict[str, Any]]:
    """The policy's own sinks, else its trigger monitor's, else the log."""
    from aifab.ops.tables import MonitorRow

    if spec.sinks is not None:
        return [sink.model_dump() for sink in spec.sinks]
    with session_scope() as s:
        row = s.get(MonitorRow, spec.trigger.monitor)
        sinks = list((row.spec or {}).get("sinks") or []) if row is not None else []
    return sinks or [{"type": "log"}]


def _failed(name: str, spec: PolicySpec, rec: _Record, why: str) -> dict[str, Any]:
    """Finish as ``failed`` and alert through the sinks; clients are served as before."""
    from aifab.ops.alert_rules import Breach
    from aifab.ops.alerts import process_breaches

    breach = Breach(RETRAIN_FAILED, 1.0, 0.0, "critical", f"policy {name}: {why}")
    try:
        sent = process_breaches(
            f"policy:{name}", spec.deployment, [breach], _sinks(spec), judged=[RETRAIN_FAILED]
        )
        rec.step("alert", rule=RETRAIN_FAILED, why=why, alerts=[a["id"] for a in sent])
    except Exception as exc:  # noqa: BLE001 - the failure is recorded even if alerting fails
        rec.step("alert", rule=RETRAIN_FAILED, why=why, error=f"{type(exc).__name__}: {exc}")
    return rec.finish("failed", why)


def _resolve_failure(name: str, spec: PolicySpec) -> None:
    """A retraining that got through the gate resolves the policy's failure alert, if firing."""
    from aifab.ops.alerts import process_breaches

    process_breaches(f"policy:{name}", spec.deployment, [], _sinks(spec), judged=[RETRAIN_FAILED])


def _retrain(name: str, spec: PolicySpec, rec: _Record) -> str:
    from aifab.jobs.service import job_result, submit

    config, pinned = _newest_data(dict(spec.retrain.config))  # type: ignore[arg-type]
    job = submit(_job_spec(name, spec, config))
    rec.step("retrain", job=job["id"], data=pinned)
    final = _wait_job(job["id"], spec.retrain.timeout_s)
    if final["state"] != "succeeded":
        raise AifabError(f"job {job['id']} {final['state']}: {final.get('reason')}")
    result = job_result(job["id"]) or {}
    version = result.get("model_version")
    if not version:
        raise AifabError(f"job {job['id']} registered no model version")
    candidate = str(version) if "@" in str(version) else f"{spec.model}@{version}"
    rec.step("candidate", model=candidate, run_id=result.get("run_id"), job=job["id"])
    return candidate


def _wait_job(job_id: str, timeout_s: float) -> dict[str, Any]:
    """Wait for the job: a live worker (``aifab serve``/``worker``) runs it, else one here."""
    from aifab.jobs.service import FINAL, cancel, get_job, list_workers

    if not list_workers(alive_only=True):
        from aifab.jobs.worker import run_until_final

        return run_until_final(job_id)
    deadline = time.monotonic() + timeout_s
    while (job := get_job(job_id))["state"] not in FINAL:
        if time.monotonic() > deadline:
            cancel(job_id)
            return {**job, "state": "timeout", "reason": f"not done in {timeout_s:g} s"}
        time.sleep(0.5)
    return job


def _gate(spec: PolicySpec, candidate: str, rec: _Record) -> tuple[GateResult, dict[str, Any]]:
    from aifab.ops.gate import evaluate_gate

    champion = f"{spec.model}@{spec.champion_alias}"
    result, basis = evaluate_gate(candidate, champion, spec.gate, spec.deployment)
    rec.step("gate", **result.as_dict(), **basis)
    return result, basis


def _canary(spec: PolicySpec, candidate: str, rec: _Record) -> dict[str, Any]:
    from aifab.inference.deployments import promote_canary, rollback_canary, update_deployment

    c = spec.canary
    update_deployment(spec.deployment, canary=candidate, canary_weight=c.weight)
    started = time.time()
    rec.step("canary", deployment=spec.deployment, model=candidate, weight=c.weight)
    while True:
        time.sleep(min(0.5, c.window_s / 4))
        requests, errors, failed = _canary_traffic(spec.deployment, candidate, started)
        quality = _canary_quality(spec.deployment, candidate, started, c.quality)
        if failed:
            decision, why = "rollback", f"the canary failed to load: {failed}"
        else:
            decision, why = canary_decision(
                requests=requests,
                errors=errors,
                elapsed_s=time.time() - started,
                window_s=c.window_s,
                min_requests=c.min_requests,
                max_error_rate=c.max_error_rate,
                max_wait_s=c.max_wait_s,
                quality=quality,
            )
        if decision != "wait":
            break
    watched = {"quality": quality.__dict__} if quality is not None else {}
    rec.step("watch", requests=requests, errors=errors, decision=decision, why=why, **watched)
    if decision == "promote":
        promote_canary(spec.deployment, force=True)  # the gate judged both on the same rows
        rec.step("promote", model=candidate, alias=spec.champion_alias)
        return rec.finish("promoted", f"gate passed; canary {why}")
    rollback_canary(spec.deployment)
    rec.step("rollback", model=candidate)
    return rec.finish("rolled_back", f"gate passed; canary rolled back: {why}")


def _canary_traffic(deployment: str, model: str, since: float) -> tuple[int, int, str | None]:
    """Canary requests and 5xx answers since ``since``; the load error if it failed."""
    from sqlalchemy import func, select

    from aifab.inference.deployments import get_deployment
    from aifab.inference.tables import RequestLogRow

    d = get_deployment(deployment)
    failed = d["status_reason"] if d["status"] == "failed" else None
    with session_scope() as s:
        q = select(func.count(), func.sum(RequestLogRow.status >= 500)).where(
            RequestLogRow.deployment == deployment,
            RequestLogRow.model_version == model,
            RequestLogRow.ts >= since,
        )
        n, errs = s.execute(q).one()
    return int(n or 0), int(errs or 0), failed


def _canary_quality(
    deployment: str, candidate: str, since: float, spec: CanaryQualitySpec
) -> Quality | None:
    """Labelled accuracy of the canary and of the primary on the requests each served."""
    from aifab.ops.feedback import labelled_traffic

    if not spec.enabled:
        return None
    rows = [r for r in labelled_traffic(deployment, since) if r["predicted"] is not None]
    canary = [r["predicted"] == r["label"] for r in rows if r["model"] == candidate]
    primary = [r["predicted"] == r["label"] for r in rows if r["model"] != candidate]
    return Quality(
        canary=sum(canary) / len(canary) if canary else None,
        canary_labels=len(canary),
        primary=sum(primary) / len(primary) if primary else None,
        primary_labels=len(primary),
        min_labels=spec.min_labels,
        tolerance=spec.tolerance,
    )
