"""One sweep trial from the job's side: report to Optuna through the metadata DB; tag its run.

The job started by ``aifab train --sweep`` finds its trial through ``AIFAB_OPTUNA_*`` variables.
A recipe calls :func:`trial_reporter` once (``None`` outside a sweep), reports its validation
metric after each evaluation, stops early when told to prune, and sets the final objective.
optuna is imported inside functions, so importing this module is cheap.
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aifab.core.errors import InvalidInputError

if TYPE_CHECKING:
    from optuna.pruners import BasePruner
    from optuna.storages import RDBStorage
    from optuna.trial import Trial

ENV_STORAGE = "AIFAB_OPTUNA_STORAGE"
ENV_STUDY = "AIFAB_OPTUNA_STUDY"
ENV_TRIAL = "AIFAB_OPTUNA_TRIAL"
ENV_METRIC = "AIFAB_OPTUNA_METRIC"

#: Trial user attributes written by the job and read by the sweep driver.
ATTR_OBJECTIVE = "objective"
ATTR_PRUNED = "aifab.pruned"
ATTR_RUN_ID = "aifab.run_id"
#: Study user attribute holding the pruner settings (the job rebuilds the same pruner).
ATTR_PRUNER = "aifab.pruner"

_log = logging.getLogger(__name__)

__all__ = [
    "ATTR_OBJECTIVE",
    "ATTR_PRUNED",
    "ATTR_PRUNER",
    "ATTR_RUN_ID",
    "TrialReporter",
    "build_pruner",
    "open_storage",
    "tag_trial_run",
    "trial_env",
    "trial_reporter",
]


def _sqlite_begin_immediate(storage: RDBStorage) -> None:
    """Make SQLite transactions take the write lock up front, as aifab's own engine does.

    With pysqlite's lazy BEGIN, a read-then-write transaction fails at once with "database is
    locked" when another process (a trial job, the driver) committed in between; BEGIN IMMEDIATE
    queues for the lock instead, under the busy timeout.
    """
    from sqlalchemy import event

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # let the "begin" hook issue BEGIN itself

    def on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    event.listen(storage.engine, "connect", on_connect)
    event.listen(storage.engine, "begin", on_begin)
    storage.engine.dispose()  # connections opened during setup lack the hooks


def open_storage(url: str, *, create_tables: bool = True) -> RDBStorage:
    """Optuna's RDB storage on the aifab metadata DB at ``url``.

    Optuna keeps its tables and its own ``alembic_version`` beside aifab's (whose revision is in
    ``aifab_schema_version``). A trial job skips creating tables (the driver did), which saves
    it a schema inspection.
    """
    import optuna
    from optuna.storages import RDBStorage

    from aifab.core.db import get_engine

    get_engine(url)  # the metadata DB (and its directory) exist, migrated, before Optuna's tables
    # Optuna logs a line per trial at INFO; the sweep reports trials through its own output.
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sqlite = url.startswith("sqlite")
    kwargs: dict[str, Any] = {"connect_args": {"timeout": 60}} if sqlite else {}
    storage = RDBStorage(
        url,
        engine_kwargs=kwargs,
        skip_table_creation=not create_tables,
    )
    if sqlite:
        _sqlite_begin_immediate(storage)
    return storage


def build_pruner(settings: Mapping[str, Any] | None) -> BasePruner:
    """The pruner described by ``{"kind": "median"|"none", "warmup_steps", "startup_trials"}``."""
    from optuna.pruners import MedianPruner, NopPruner

    settings = settings or {}
    if settings.get("kind", "none") == "median":
        return MedianPruner(
            n_startup_trials=int(settings.get("startup_trials", 5)),
            n_warmup_steps=int(settings.get("warmup_steps", 0)),
        )
    return NopPruner()


def trial_env(storage_url: str, study: str, number: int, metric: str) -> dict[str, str]:
    """Environment variables that make a job report to trial ``number`` of ``study``."""
    return {
        ENV_STORAGE: storage_url,
        ENV_STUDY: study,
        ENV_TRIAL: str(number),
        ENV_METRIC: metric,
    }


class TrialReporter:
    """One sweep trial as seen from its job: intermediate values, pruning, the final objective.

    In a multi-replica job, rank 0 reports and asks :meth:`should_prune`, then shares the
    decision with the other ranks (they must stop together).
    """

    def __init__(self, trial: Trial, metric: str) -> None:
        self._trial = trial
        self.metric = metric
        self.study = trial.study.study_name
        self.number = trial.number

    def report(self, value: float, step: int) -> None:
        """Record the sweep metric's ``value`` at ``step`` (an epoch or an eval step)."""
        value = float(value)
        if not math.isfinite(value):
            return  # a NaN/inf point would poison the median other trials are compared with
        try:
            with warnings.catch_warnings():
                # A job resumed from a checkpoint reports some steps again; the first value stays.
                warnings.filterwarnings("ignore", message="The reported value is ignored")
                self._trial.report(value, step)
        except RuntimeError as exc:  # the driver already finished this trial (see _set)
            _log.warning("sweep trial %d: report ignored: %s", self.number, exc)

    def should_prune(self) -> bool:
        """Whether the pruner stops this trial now (recorded, so the driver marks it PRUNED).

        On True the recipe stops training, ends its run with tag ``aifab.pruned=true`` and
        exits with code 0.
        """
        if not self._trial.should_prune():
            return False
        self._set(ATTR_PRUNED, True)
        return True

    def report_metrics(self, metrics: Mapping[str, float], step: int) -> bool:
        """Report this sweep's metric from an evaluation's ``metrics``; return should_prune.

        Raises:
            InvalidInputError: ``metrics`` lacks the sweep metric (the names are listed).
        """
        self.report(self._pick(metrics), step)
        return self.should_prune()

    def set_objective(self, value: float) -> None:
        """Record the trial's final objective (read by the driver when the job ends)."""
        self._set(ATTR_OBJECTIVE, float(value))

    def finish(self, metrics: Mapping[str, float]) -> None:
        """Record the sweep metric of the final ``metrics`` as the objective."""
        self.set_objective(self._pick(metrics))

    def attach_run(self, run_id: str) -> None:
        """Name the job's MLflow run, so the driver tags it without searching by job id."""
        self._set(ATTR_RUN_ID, run_id)

    def _set(self, key: str, value: Any) -> None:
        try:
            self._trial.set_user_attr(key, value)
        except RuntimeError as exc:
            # The driver finished the trial already (it failed waiting, or a rerun of the sweep
            # gave up on it): the job's results no longer count, but the job must not crash.
            _log.warning("sweep trial %d: %s not recorded: %s", self.number, key, exc)

    def _pick(self, metrics: Mapping[str, float]) -> float:
        if self.metric not in metrics:
            known = ", ".join(sorted(metrics)) or "none"
            raise InvalidInputError(
                f"sweep metric {self.metric!r} is not among the evaluation metrics ({known})"
            )
        return float(metrics[self.metric])


def trial_reporter(env: Mapping[str, str] | None = None) -> TrialReporter | None:
    """The reporter of the sweep trial this process runs, or None outside a sweep.

    Args:
        env: where to read ``AIFAB_OPTUNA_*`` from (default: this process's environment).

    Raises:
        InvalidInputError: the variables are set but name no trial of a stored study.
    """
    env = os.environ if env is None else env
    url, study_name, number = env.get(ENV_STORAGE), env.get(ENV_STUDY), env.get(ENV_TRIAL)
    if not (url and study_name and number):
        return None
    import optuna
    from optuna.exceptions import StorageInternalError
    from optuna.samplers import RandomSampler
    from sqlalchemy.exc import DBAPIError

    where = f"{ENV_STUDY}={study_name!r} {ENV_TRIAL}={number!r}"
    try:
        storage = open_storage(url, create_tables=False)
        study_id = storage.get_study_id_from_name(study_name)
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, int(number))
    except (KeyError, ValueError):
        raise InvalidInputError(f"{where}: no such sweep trial") from None
    except (DBAPIError, StorageInternalError) as exc:  # e.g. no Optuna tables: no sweep ran
        cause = exc.__cause__ or exc
        first = str(getattr(cause, "orig", None) or cause).splitlines()[0]
        raise InvalidInputError(f"{where}: cannot read the sweep study ({first})") from None
    pruner = build_pruner(storage.get_study_user_attrs(study_id).get(ATTR_PRUNER))
    # The job never samples (the driver did), so the cheapest sampler will do.
    study = optuna.load_study(
        study_name=study_name, storage=storage, sampler=RandomSampler(), pruner=pruner
    )
    return TrialReporter(optuna.trial.Trial(study, trial_id), env.get(ENV_METRIC) or "objective")


def _tracking_client() -> Any | None:
    """The MLflow client, or None when the default store was never created (so has no runs)."""
    from aifab.track import get_client, tracking_uri

    uri = tracking_uri()
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        return None
    return get_client()


def tag_trial_run(
    job_id: str | None, run_id: str | None, tags: Mapping[str, str]
) -> tuple[str, dict[str, float]] | None:
    """Tag a trial's MLflow run: ``run_id``, else the run tagged ``aifab.job_id=<job_id>``.

    Returns:
        ``(run_id, final metrics)``, or None when no such run exists or MLflow fails (tags are
        a convenience: the study in the metadata DB is the record, so a sweep goes on).
    """
    try:
        client = _tracking_client()
        if client is None:
            return None
        if run_id is None and job_id and "'" not in job_id:
            ids = [e.experiment_id for e in client.search_experiments()]
            found = client.search_runs(ids, f"tags.`aifab.job_id` = '{job_id}'", max_results=1)
            run_id = found[0].info.run_id if found else None
        if run_id is None:
            return None
        for key, value in tags.items():
            client.set_tag(run_id, key, value)
        return run_id, dict(client.get_run(run_id).data.metrics)
    except Exception as exc:
        _log.warning("sweep run of job %s: cannot tag it: %s", job_id or run_id, exc)
        return None
