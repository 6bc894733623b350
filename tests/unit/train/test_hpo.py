"""Hyper-parameter sweeps: a real Optuna study in the SQLite metadata DB, trial jobs that report
through the AIFAB_OPTUNA_* protocol (in subprocesses, like recipes), pruning, failures,
parallelism, resuming, MLflow tags and bad sweep specs. No recipe and no scheduler: a toy recipe
config is registered and ``submit``/``wait`` are small fakes."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import field_validator

from aifab.core.config import StrictConfig
from aifab.core.errors import InvalidInputError
from aifab.core.settings import get_settings
from aifab.train.hpo import TrialResult, run_sweep
from aifab.train.recipes import RECIPE_CONFIGS
from aifab.train.trial import TrialReporter, open_storage, trial_reporter

QUADRATIC = {"type": "float", "low": -10.0, "high": 10.0}


class ToyConfig(StrictConfig):
    """The config of a pretend recipe: minimise (x - 2)^2 over ``steps`` evaluations."""

    x: float = 0.0
    hidden: list[int] = [8]
    steps: int = 4

    @field_validator("steps")
    @classmethod
    def _steps(cls, v: int) -> int:
        if v == 5:  # a value only some sampled points hit (the range ends pass)
            raise ValueError("5 steps are unlucky")
        return v


@pytest.fixture(autouse=True)
def toy_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(RECIPE_CONFIGS._entries, "toy", "tests:ToyConfig")
    monkeypatch.setitem(RECIPE_CONFIGS._loaded, "toy", ToyConfig)


def toy_objective(config: dict[str, Any], reporter: TrialReporter) -> None:
    """What a recipe does: report each evaluation, stop when pruned, set the objective."""
    for step in range(config["steps"]):
        loss = (config["x"] - 2.0) ** 2 + 1.0 / (step + 1)
        if reporter.report_metrics({"loss": loss, "other": 0.0}, step):
            return
    reporter.finish({"loss": (config["x"] - 2.0) ** 2})


class ThreadJobs:
    """Fake scheduler running each job's objective inside ``wait`` (on the driver's threads)."""

    def __init__(self, barrier: threading.Barrier | None = None, silent: str = "") -> None:
        self.specs: dict[str, dict[str, Any]] = {}
        self.barrier = barrier
        self.silent = silent  # a job that reports nothing (its run's metric is the objective)
        self.active = self.max_active = 0
        self.lock = threading.Lock()

    def submit(self, spec: dict[str, Any]) -> str:
        job_id = f"job{len(self.specs)}"
        self.specs[job_id] = spec
        return job_id

    def wait(self, job_id: str) -> dict[str, Any]:
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            if self.barrier is not None:
                self.barrier.wait(timeout=20)  # breaks unless two jobs run at once
            spec = self.specs[job_id]
            if job_id == self.silent:
                return {"id": job_id, "state": "succeeded", "exit_code": 0, "reason": None}
            reporter = trial_reporter(spec["env"])
            assert reporter is not None
            toy_objective(spec["run"]["config"], reporter)
            return {"id": job_id, "state": "succeeded", "exit_code": 0, "reason": None}
        finally:
            with self.lock:
                self.active -= 1


#: A trial job as a recipe would run it: a separate process reading only its environment.
JOB_CODE = """
import json, os, sys
if os.environ["AIFAB_OPTUNA_TRIAL"] in os.environ["TOY_FAIL"].split(","):
    sys.exit(3)
from aifab.train.trial import trial_reporter
cfg = json.loads(os.environ["TOY_CONFIG"])
reporter = trial_reporter()
assert reporter is not None and reporter.metric == "loss", reporter
for step in range(cfg["steps"]):
    loss = (cfg["x"] - 2.0) ** 2 + 1.0 / (step + 1)
    reporter.report(loss, step)
    if reporter.should_prune():
        sys.exit(0)  # pruned: end early, successfully
reporter.set_objective((cfg["x"] - 2.0) ** 2)
"""


class ProcessJobs:
    """Fake scheduler starting each job as a ``python -c`` subprocess."""

    def __init__(self, fail: frozenset[int] = frozenset()) -> None:
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.specs: dict[str, dict[str, Any]] = {}
        self.fail = ",".join(str(n) for n in fail)

    def submit(self, spec: dict[str, Any]) -> str:
        job_id = f"job{len(self.procs)}"
        env = {**os.environ, **spec["env"], "TOY_FAIL": self.fail}
        env["TOY_CONFIG"] = json.dumps(spec["run"]["config"])
        self.procs[job_id] = subprocess.Popen([sys.executable, "-c", JOB_CODE], env=env)
        self.specs[job_id] = spec
        return job_id

    def wait(self, job_id: str) -> dict[str, Any]:
        code = self.procs[job_id].wait(timeout=60)
        state = "succeeded" if code == 0 else "failed"
        return {"id": job_id, "state": state, "exit_code": code, "reason": None}


def sweep_spec(**over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "metric": {"name": "loss", "goal": "minimize"},
        "params": {"x": QUADRATIC},
        "trials": 15,
        "pruner": "none",
    }
    return {**spec, **over}


def load_study(name: str) -> Any:
    import optuna

    return optuna.load_study(study_name=name, storage=open_storage(get_settings().resolved_db_url))


def test_tpe_finds_the_quadratic_minimum_and_the_study_persists() -> None:
    jobs = ThreadJobs()
    seen: list[TrialResult] = []
    result = run_sweep(
        "toy",
        {"steps": 2},
        sweep_spec(sampler="tpe", seed=1),
        submit=jobs.submit,
        wait=jobs.wait,
        job_template={"name": "Toy Sweep", "queue": "default", "env": {"KEEP": "1"}},
        on_trial=seen.append,
    )
    assert len(result.trials) == 15 and len(seen) == 15
    assert {t.state for t in result.trials} == {"COMPLETE"}
    assert result.best_value is not None and result.best_value < 0.1
    assert abs(result.best_params["x"] - 2.0) < 0.35
    assert result.best_job_id == f"job{result.best_trial}"
    assert result.study.startswith("toy-") and result.goal == "minimize"

    spec = jobs.specs["job0"]
    assert spec["name"] == "toy-sweep-t0" and spec["queue"] == "default"
    assert spec["run"]["recipe"] == "toy" and spec["run"]["config"]["hidden"] == [8]
    assert spec["env"]["KEEP"] == "1" and spec["env"]["AIFAB_OPTUNA_TRIAL"] == "0"
    assert spec["env"]["AIFAB_OPTUNA_STORAGE"] == get_settings().resolved_db_url

    study = load_study(result.study)  # reloaded from the metadata DB
    assert len(study.trials) == 15 and study.best_trial.number == result.best_trial
    assert study.trials[3].user_attrs["aifab.job_id"] == "job3"
    assert study.user_attrs["aifab.recipe"] == "toy"
    assert len(study.trials[0].intermediate_values) == 2

    again = run_sweep("toy", {"steps": 2}, sweep_spec(), submit=jobs.submit, wait=jobs.wait)
    assert again.study == result.study and len(jobs.specs) == 15  # resumed: nothing to run
    more = run_sweep("toy", {"steps": 2}, sweep_spec(trials=17), submit=jobs.submit, wait=jobs.wait)
    assert len(more.trials) == 17 and len(jobs.specs) == 17


def test_parallel_two_keeps_two_trials_in_flight() -> None:
    jobs = ThreadJobs(barrier=threading.Barrier(2))
    result = run_sweep(
        "toy",
        {"steps": 1},
        sweep_spec(trials=4, parallel=2, sampler="random", study="par"),
        submit=jobs.submit,
        wait=jobs.wait,
    )
    assert [t.state for t in result.trials] == ["COMPLETE"] * 4
    assert jobs.max_active == 2


def test_subprocess_trials_are_pruned_or_failed_and_the_sweep_goes_on() -> None:
    jobs = ProcessJobs(fail=frozenset({1}))
    spec = sweep_spec(
        trials=4, sampler="random", seed=0, pruner="median", startup_trials=1, warmup_steps=1
    )
    result = run_sweep("toy", {"steps": 4}, spec, submit=jobs.submit, wait=jobs.wait)
    # seed 0 samples x = 0.98, (4.3), 2.06, 0.9: the last is worse than the median at step 1
    assert [t.state for t in result.trials] == ["COMPLETE", "FAIL", "COMPLETE", "PRUNED"]
    assert result.trials[1].reason == "job job1 failed: exit code 3"
    assert [t.job_id for t in result.trials] == ["job0", "job1", "job2", "job3"]

    study = load_study(result.study)
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert all(len(t.intermediate_values) == 4 for t in done)
    for trial in study.trials:
        if trial.state.name == "PRUNED":
            step = max(trial.intermediate_values)
            assert 1 <= step < 3  # warmup respected, stopped early
            earlier = [t.intermediate_values[step] for t in done if t.number < trial.number]
            assert trial.intermediate_values[step] > statistics.median(earlier)
            assert trial.value == trial.intermediate_values[step]
    best = min(done, key=lambda t: t.value)
    assert result.best_trial == best.number and result.best_value == pytest.approx(best.value)


def test_an_interrupted_sweep_resumes_waiting_for_its_running_jobs() -> None:
    gate = threading.Event()
    jobs = ThreadJobs()
    plain_wait = jobs.wait

    def wait(job_id: str) -> dict[str, Any]:
        if job_id == "job1":
            gate.wait(timeout=20)  # still running when the driver is interrupted
        return plain_wait(job_id)

    def submit(spec: dict[str, Any]) -> str:
        if len(jobs.specs) == 2:
            raise KeyboardInterrupt
        return jobs.submit(spec)

    spec = sweep_spec(trials=4, parallel=2, sampler="random", study="resume")
    with pytest.raises(KeyboardInterrupt):
        run_sweep("toy", {}, spec, submit=submit, wait=wait)
    assert [t.state.name for t in load_study("resume").trials] == ["COMPLETE", "RUNNING", "FAIL"]

    gate.set()
    result = run_sweep("toy", {}, spec, submit=jobs.submit, wait=wait)
    assert [t.state for t in result.trials] == ["COMPLETE", "COMPLETE", "FAIL", "COMPLETE"]
    assert [t.job_id for t in result.trials] == ["job0", "job1", None, "job2"]
    assert result.trials[2].reason == "submit failed: "


def test_a_sweep_stops_after_too_many_failures_in_a_row() -> None:
    submitted: list[dict[str, Any]] = []

    def submit(spec: dict[str, Any]) -> str:
        submitted.append(spec)
        return f"job{len(submitted) - 1}"

    def wait(job_id: str) -> dict[str, Any]:
        return {"id": job_id, "state": "failed", "exit_code": 1, "reason": "out of memory"}

    spec = sweep_spec(trials=10, max_failures=3, sampler="random")
    result = run_sweep("toy", {}, spec, submit=submit, wait=wait)
    assert [t.state for t in result.trials] == ["FAIL"] * 3 and len(submitted) == 3
    assert result.best_trial is None and result.best_params == {}
    assert result.stopped == (
        "stopped after 3 failed trials in a row; last: job job2 failed: out of memory"
    )


def test_best_and_trial_runs_are_tagged_in_mlflow() -> None:
    from aifab.track import get_run, start_run

    jobs = ThreadJobs(silent="job1")

    def submit(spec: dict[str, Any]) -> str:
        job_id = jobs.submit(spec)
        run = start_run("sweep-test", tags={"aifab.job_id": job_id}, system_metrics=False)
        if job_id == "job0":  # one job names its run itself, the others are found by tag
            reporter = trial_reporter(spec["env"])
            assert reporter is not None
            reporter.attach_run(run.id)
        run.log_metrics({"loss": 99.0}, step=0)
        run.end()
        return job_id

    spec = sweep_spec(
        trials=3, sampler="random", params={"x": {"type": "int", "low": 0, "high": 9}}
    )
    result = run_sweep("toy", {}, spec, submit=submit, wait=jobs.wait)
    for trial in result.trials:
        assert trial.state == "COMPLETE" and trial.run_id is not None
        expected = 99.0 if trial.job_id == "job1" else (trial.params["x"] - 2) ** 2
        assert trial.value == pytest.approx(expected)
        tags = get_run(trial.run_id)["tags"]
        assert tags["aifab.sweep.study"] == result.study
        assert tags["aifab.sweep.trial"] == str(trial.number)
        best = "true" if trial.number == result.best_trial else None
        assert tags.get("aifab.sweep.best") == best
    assert result.best_value == min(t.value or 0 for t in result.trials)


def test_categorical_lists_and_int_ranges_reach_the_config() -> None:
    jobs = ThreadJobs()
    params = {
        "hidden": {"type": "categorical", "choices": [[4], [8, 4]]},
        "steps": {"type": "int", "low": 1, "high": 3},
        "x": {"type": "float", "low": 1e-3, "high": 1.0, "log": True},
    }
    result = run_sweep(
        "toy",
        {},
        sweep_spec(trials=4, sampler="random", params=params),
        submit=jobs.submit,
        wait=jobs.wait,
    )
    configs = [s["run"]["config"] for s in jobs.specs.values()]
    assert all(c["hidden"] in ([4], [8, 4]) and c["steps"] in (1, 2, 3) for c in configs)
    assert all(isinstance(c["steps"], int) and 1e-3 <= c["x"] <= 1.0 for c in configs)
    assert result.best_params["hidden"] in ([4], [8, 4])


def test_a_point_the_config_rejects_fails_that_trial_only() -> None:
    jobs = ThreadJobs()
    spec = sweep_spec(
        trials=6, sampler="random", seed=0, params={"steps": {"type": "int", "low": 4, "high": 6}}
    )
    result = run_sweep("toy", {}, spec, submit=jobs.submit, wait=jobs.wait)
    assert len(result.trials) == 6
    for trial in result.trials:
        if trial.params["steps"] == 5:
            assert trial.state == "FAIL" and trial.job_id is None
            assert "steps: Value error, 5 steps are unlucky" in (trial.reason or "")
        else:
            assert trial.state == "COMPLETE" and trial.job_id is not None
    assert any(t.state == "FAIL" for t in result.trials)
    assert len(jobs.specs) == sum(t.state == "COMPLETE" for t in result.trials)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({**sweep_spec(), "trails": 3}, "trails: unknown key"),
        (sweep_spec(metric={"name": "loss", "goal": "up"}), "metric.goal"),
        (sweep_spec(params={}), "params"),
        (sweep_spec(params={"x": {"type": "float", "low": 2}}), "needs 'low' and 'high'"),
        (sweep_spec(params={"x": {"type": "float", "low": 2, "high": 1}}), r"low \(2\) is above"),
        (sweep_spec(params={"x": {"type": "float", "low": 0, "high": 1, "log": True}}), "log"),
        (sweep_spec(params={"x": {"type": "categorical"}}), "needs 'choices'"),
        (sweep_spec(params={"x": {"type": "int", "low": 0.5, "high": 3}}), "whole"),
        (sweep_spec(params={"x": {"type": "real", "low": 0, "high": 1}}), "params.x.type"),
        (sweep_spec(params={"x..y": QUADRATIC}), "not a dotted config key"),
        (sweep_spec(parallel=0), "parallel"),
        (sweep_spec(study="bad name!"), "study"),
        (sweep_spec(params={"xx": QUADRATIC}), r"sweep params \(xx=-10.0\): .*xx: unknown key"),
        (sweep_spec(params={"x.y": QUADRATIC}), r"\(x.y=-10.0\): toy config: x: Input should be"),
        (
            sweep_spec(params={"hidden": {"type": "categorical", "choices": [[4], "wide"]}}),
            r"hidden='wide'.*hidden: Input should be a valid list",
        ),
    ],
)
def test_bad_sweep_specs_are_named(spec: dict[str, Any], message: str) -> None:
    jobs = ThreadJobs()
    with pytest.raises(InvalidInputError, match=message):
        run_sweep("toy", {}, spec, submit=jobs.submit, wait=jobs.wait)
    assert not jobs.specs


def test_bad_sweep_yaml_file_and_template_are_named(tmp_path: Path) -> None:
    jobs = ThreadJobs()
    path = tmp_path / "sweep.yaml"
    path.write_text("metric: {name: loss}\nparams:\n  x: {type: float, low: 0, hihg: 1}\n")
    with pytest.raises(InvalidInputError, match=r"sweep.yaml: .*params.x.hihg: unknown key"):
        run_sweep("toy", {}, path, submit=jobs.submit, wait=jobs.wait)
    with pytest.raises(InvalidInputError, match="job_template: 'run' is set by the sweep"):
        run_sweep(
            "toy", {}, sweep_spec(), submit=jobs.submit, wait=jobs.wait, job_template={"run": {}}
        )
    with pytest.raises(InvalidInputError, match=r"\(x.y=-10.0\): x.y: x is not a mapping"):
        run_sweep(
            "toy",
            {"x": 1},
            sweep_spec(params={"x.y": QUADRATIC}),
            submit=jobs.submit,
            wait=jobs.wait,
        )
    with pytest.raises(InvalidInputError, match="unknown recipe 'nope'"):
        run_sweep("nope", {}, sweep_spec(), submit=jobs.submit, wait=jobs.wait)


def test_outside_a_sweep_there_is_no_reporter() -> None:
    assert trial_reporter({}) is None
    env = {
        "AIFAB_OPTUNA_STORAGE": get_settings().resolved_db_url,
        "AIFAB_OPTUNA_STUDY": "missing",
        "AIFAB_OPTUNA_TRIAL": "0",
    }
    with pytest.raises(InvalidInputError, match="'missing'.*cannot read the sweep study"):
        trial_reporter(env)  # no sweep ever ran here: no Optuna tables
    open_storage(env["AIFAB_OPTUNA_STORAGE"])
    with pytest.raises(InvalidInputError, match="STUDY='missing'.*: no such sweep trial"):
        trial_reporter(env)
