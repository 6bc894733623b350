"""Hyper-parameter search: run a recipe's sweep trials as jobs, driving an Optuna study.

The study (ask-and-tell) is stored in the aifab metadata DB. The driver never imports the job
scheduler: the caller passes ``submit`` and ``wait``. Each trial job reports through
:mod:`aifab.train.trial`; its MLflow run is tagged with the study afterwards.
"""

from __future__ import annotations

import math
import queue
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aifab.core.config import as_config
from aifab.core.errors import ConflictError, InvalidInputError
from aifab.core.settings import get_settings
from aifab.train.hpo_spec import (
    MetricSpec,
    ParamSpec,
    SweepResult,
    SweepSpec,
    TrialResult,
    check_params,
    default_study_name,
    trial_config,
)
from aifab.train.trial import (
    ATTR_OBJECTIVE,
    ATTR_PRUNED,
    ATTR_PRUNER,
    ATTR_RUN_ID,
    build_pruner,
    open_storage,
    tag_trial_run,
    trial_env,
)

if TYPE_CHECKING:
    from optuna import Study
    from optuna.storages import RDBStorage
    from optuna.trial import FrozenTrial

ATTR_JOB_ID = "aifab.job_id"
ATTR_REASON = "aifab.reason"
_JOB_NAME = re.compile(r"[^a-z0-9.\-_]+")

__all__ = ["MetricSpec", "ParamSpec", "SweepResult", "SweepSpec", "TrialResult", "run_sweep"]


def _open_study(storage: RDBStorage, name: str, recipe: str, spec: SweepSpec) -> Study:
    import optuna

    sampler: optuna.samplers.BaseSampler
    if spec.sampler == "tpe":
        startup = spec.random_trials or max(2, min(10, spec.trials // 3))
        sampler = optuna.samplers.TPESampler(
            seed=spec.seed, n_startup_trials=startup, constant_liar=spec.parallel > 1
        )
    else:
        sampler = optuna.samplers.RandomSampler(seed=spec.seed)
    study = optuna.create_study(
        storage=storage,
        study_name=name,
        direction=spec.metric.goal,
        sampler=sampler,
        pruner=build_pruner(spec.pruner_settings()),
        load_if_exists=True,
    )
    attrs = study.user_attrs
    goal = study.direction.name.lower()
    if goal != spec.metric.goal or attrs.get("aifab.recipe", recipe) != recipe:
        raise ConflictError(
            f"study {name!r} exists for recipe {attrs.get('aifab.recipe')!r} with goal {goal}: "
            "set another 'study' name"
        )
    study.set_user_attr("aifab.recipe", recipe)
    study.set_user_attr("aifab.metric", spec.metric.name)
    study.set_user_attr(ATTR_PRUNER, spec.pruner_settings())
    return study


def _job_spec(
    template: Mapping[str, Any], recipe: str, config: dict[str, Any], env: dict[str, str], n: int
) -> dict[str, Any]:
    stem = _JOB_NAME.sub("-", str(template.get("name") or recipe).lower()).strip("-._")[:50]
    return {
        **template,
        "name": f"{stem or 'sweep'}-t{n}",
        "run": {"recipe": recipe, "config": config},
        "env": {**dict(template.get("env") or {}), **env},
    }


@dataclass(frozen=True)
class _Sweep:
    """What every step of one sweep needs (a record, passed explicitly)."""

    recipe: str
    base: dict[str, Any]
    spec: SweepSpec
    template: dict[str, Any]
    url: str
    storage: RDBStorage
    study: Study
    study_id: int

    def trial_id(self, number: int) -> int:
        return self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)


def _result(trial: FrozenTrial, spec: SweepSpec) -> TrialResult:
    attrs = trial.user_attrs
    params = {
        k: spec.params[k].decode(v) if k in spec.params else v for k, v in trial.params.items()
    }
    return TrialResult(
        number=trial.number,
        state=trial.state.name,
        value=trial.value,
        params=params,
        job_id=attrs.get(ATTR_JOB_ID),
        run_id=attrs.get(ATTR_RUN_ID),
        reason=attrs.get(ATTR_REASON),
    )


def _tell(
    sweep: _Sweep, number: int, state: str, value: float | None = None, reason: str | None = None
) -> TrialResult:
    from optuna.trial import TrialState

    trial_id = sweep.trial_id(number)
    if reason:
        sweep.storage.set_trial_user_attr(trial_id, ATTR_REASON, reason)
    values = value if state == "COMPLETE" else None
    sweep.study.tell(number, values, state=TrialState[state], skip_if_finished=True)
    return _result(sweep.storage.get_trial(trial_id), sweep.spec)


def _launch(
    sweep: _Sweep, submit: Callable[[dict[str, Any]], str]
) -> tuple[int, str] | TrialResult:
    """Ask for a point and submit its job; a config the point makes invalid fails the trial."""
    spec = sweep.spec
    trial = sweep.study.ask({k: p.distribution() for k, p in spec.params.items()})
    values = {k: spec.params[k].decode(v) for k, v in trial.params.items()}
    try:
        config = trial_config(sweep.recipe, sweep.base, values)
    except InvalidInputError as exc:
        return _tell(sweep, trial.number, "FAIL", reason=exc.message)
    env = trial_env(sweep.url, sweep.study.study_name, trial.number, spec.metric.name)
    job = _job_spec(sweep.template, sweep.recipe, config, env, trial.number)
    try:
        job_id = submit(job)
    except BaseException as exc:  # the queue is gone, the spec is refused...: stop the sweep
        _tell(sweep, trial.number, "FAIL", reason=f"submit failed: {exc}")
        raise
    trial.set_user_attr(ATTR_JOB_ID, job_id)
    return trial.number, job_id


def _trial_run(sweep: _Sweep, number: int, attrs: Mapping[str, Any]) -> float | None:
    """Tag the trial's run with the study; return its final sweep metric (None if unknown)."""
    tags = {"aifab.sweep.study": sweep.study.study_name, "aifab.sweep.trial": str(number)}
    found = tag_trial_run(attrs.get(ATTR_JOB_ID), attrs.get(ATTR_RUN_ID), tags)
    if found is None:
        return None
    run_id, metrics = found
    sweep.storage.set_trial_user_attr(sweep.trial_id(number), ATTR_RUN_ID, run_id)
    value = metrics.get(sweep.spec.metric.name)
    return None if value is None else float(value)


def _finish(sweep: _Sweep, number: int, job: Mapping[str, Any] | BaseException) -> TrialResult:
    """Tell the study how trial ``number`` ended, from its job and what the job reported."""
    attrs = sweep.storage.get_trial(sweep.trial_id(number)).user_attrs
    job_id = attrs.get(ATTR_JOB_ID)
    if isinstance(job, BaseException):
        return _tell(sweep, number, "FAIL", reason=f"waiting for job {job_id} failed: {job}")
    run_value = _trial_run(sweep, number, attrs)
    if attrs.get(ATTR_PRUNED):
        return _tell(sweep, number, "PRUNED")
    if job.get("state") != "succeeded":
        why = job.get("reason") or f"exit code {job.get('exit_code')}"
        return _tell(sweep, number, "FAIL", reason=f"job {job_id} {job.get('state')}: {why}")
    value = attrs.get(ATTR_OBJECTIVE, run_value)
    if value is None or not math.isfinite(float(value)):
        metric = sweep.spec.metric.name
        why = "no objective" if value is None else f"objective {value}"
        reason = f"job {job_id} reported {why} (trial_reporter().finish, or metric {metric!r})"
        return _tell(sweep, number, "FAIL", reason=reason)
    return _tell(sweep, number, "COMPLETE", float(value))


def _resume(
    sweep: _Sweep,
    watch: Callable[[int, str], None],
    record: Callable[[TrialResult], None],
) -> tuple[int, int]:
    """Pick up what a stopped sweep left; return ``(finished, in flight)`` trial counts.

    Running trials with a job are waited for again; those never submitted fail.
    """
    from optuna.trial import TrialState

    finished = in_flight = 0
    for trial in sweep.study.get_trials(deepcopy=False):
        if trial.state.is_finished():
            finished += 1
        elif trial.state == TrialState.RUNNING and trial.user_attrs.get(ATTR_JOB_ID):
            watch(trial.number, trial.user_attrs[ATTR_JOB_ID])
            in_flight += 1
        elif trial.state == TrialState.RUNNING:
            record(_tell(sweep, trial.number, "FAIL", reason="sweep stopped before submitting"))
            finished += 1
    return finished, in_flight


def _drive(
    sweep: _Sweep,
    submit: Callable[[dict[str, Any]], str],
    wait: Callable[[str], Mapping[str, Any]],
    on_trial: Callable[[TrialResult], None],
) -> str | None:
    """Keep up to ``parallel`` trial jobs in flight until the study has ``trials`` finished.

    Returns:
        Why the sweep stopped early (too many failures in a row), or None.
    """
    done: queue.Queue[tuple[int, Mapping[str, Any] | BaseException]] = queue.Queue()
    streak: list[TrialResult] = []  # failures since the last trial that did not fail

    def watch(number: int, job_id: str) -> None:
        def run() -> None:
            try:
                done.put((number, wait(job_id)))
            except BaseException as exc:
                done.put((number, exc))

        # Daemon threads: an interrupted sweep leaves its trials RUNNING with their job ids,
        # and a rerun waits for those jobs instead of hanging here.
        threading.Thread(target=run, name=f"sweep-trial-{number}", daemon=True).start()

    def record(result: TrialResult) -> None:
        streak[:] = [*streak, result] if result.state == "FAIL" else []
        on_trial(result)

    finished, in_flight = _resume(sweep, watch, record)
    total = sweep.spec.trials
    limit = sweep.spec.max_failures or total + 1
    while in_flight or (finished < total and len(streak) < limit):
        while (
            in_flight < sweep.spec.parallel and finished + in_flight < total and len(streak) < limit
        ):
            launched = _launch(sweep, submit)
            if isinstance(launched, TrialResult):
                record(launched)
                finished += 1
            else:
                watch(*launched)
                in_flight += 1
        if in_flight:
            number, job = done.get()
            in_flight, finished = in_flight - 1, finished + 1
            record(_finish(sweep, number, job))
    if len(streak) < limit or finished >= total:
        return None
    return f"stopped after {len(streak)} failed trials in a row; last: {streak[-1].reason}"


def _summarize(sweep: _Sweep, stopped: str | None) -> SweepResult:
    """The study's finished trials and its best one; the best run is tagged."""
    from optuna.trial import TrialState

    frozen = sweep.study.get_trials(deepcopy=False)
    trials = [_result(t, sweep.spec) for t in frozen if t.state.is_finished()]
    best = sweep.study.best_trial if any(t.state == TrialState.COMPLETE for t in frozen) else None
    top = _result(best, sweep.spec) if best is not None else None
    if top is not None and top.run_id:
        _tag_best(sweep, top.run_id)
    return SweepResult(
        study=sweep.study.study_name,
        metric=sweep.spec.metric.name,
        goal=sweep.spec.metric.goal,
        best_trial=top.number if top else None,
        best_value=top.value if top else None,
        best_params=top.params if top else {},
        best_job_id=top.job_id if top else None,
        best_run_id=top.run_id if top else None,
        trials=trials,
        stopped=stopped,
    )


def _tag_best(sweep: _Sweep, run_id: str) -> None:
    """Tag ``run_id`` as the study's best (and untag an earlier best of a resumed study)."""
    before = sweep.study.user_attrs.get("aifab.best_run_id")
    if before and before != run_id:
        tag_trial_run(None, before, {"aifab.sweep.best": "false"})
    if tag_trial_run(None, run_id, {"aifab.sweep.best": "true"}) is not None:
        sweep.study.set_user_attr("aifab.best_run_id", run_id)


def _audit(action: str, study: str, params: dict[str, Any]) -> None:
    from aifab.core.audit import record_event
    from aifab.core.db import session_scope

    with session_scope() as s:
        record_event(s, action, f"study:{study}", params)


def run_sweep(
    recipe: str,
    base_config: Mapping[str, Any],
    sweep: SweepSpec | Path | str | Mapping[str, Any],
    *,
    submit: Callable[[dict[str, Any]], str],
    wait: Callable[[str], Mapping[str, Any]],
    job_template: Mapping[str, Any] | None = None,
    on_trial: Callable[[TrialResult], None] | None = None,
) -> SweepResult:
    """Search ``recipe``'s hyper-parameters: one job per trial, up to ``parallel`` at a time.

    The study lives in the metadata DB; running the same sweep again resumes it (trials whose
    jobs are still running are waited for, the rest are topped up to ``trials``).

    Args:
        recipe: registered recipe name (``classify``...).
        base_config: the recipe config every trial starts from (the params are set on it).
        sweep: the sweep spec (YAML path, mapping or instance).
        submit: queues a JobSpec dict and returns its job id (e.g. wraps ``aifab.jobs.submit``).
        wait: blocks until the job ends and returns its dict (``state``, ``reason``,
            ``exit_code``); called from one thread per trial in flight.
        job_template: other JobSpec fields for every trial (queue, resources, replicas, env,
            name: trial jobs are named ``<name>-t<number>``).
        on_trial: called with each trial as it finishes (e.g. to print progress).

    Returns:
        The finished trials and the best one (``best_*`` None when none completed).

    Raises:
        InvalidInputError: a bad sweep spec or template, or params the recipe config rejects
            (the key and value are named).
        ConflictError: the named study exists for another recipe or goal.
    """
    spec = as_config(SweepSpec, sweep, source="sweep")
    template = dict(job_template or {})
    if "run" in template:
        raise InvalidInputError("job_template: 'run' is set by the sweep")
    base = dict(base_config)
    check_params(recipe, base, spec)
    name = spec.study or default_study_name(recipe, base, spec)
    url = get_settings().resolved_db_url
    storage = open_storage(url)
    study = _open_study(storage, name, recipe, spec)
    state = _Sweep(
        recipe, base, spec, template, url, storage, study, storage.get_study_id_from_name(name)
    )
    _audit("train.sweep", name, {"recipe": recipe, "sweep": spec.model_dump(mode="json")})
    stopped = _drive(state, submit, wait, on_trial or (lambda _: None))
    result = _summarize(state, stopped)
    done = {"best_trial": result.best_trial, "best_value": result.best_value}
    _audit("train.sweep.finish", name, {**done, "trials": len(result.trials), "stopped": stopped})
    return result
