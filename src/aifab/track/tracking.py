"""Experiment tracking on MLflow: experiments, starting and resuming runs, their environment.

The default store is an MLflow SQLite DB in the workspace (``<AIFAB_HOME>/mlflow.db``) with
artifacts under ``<AIFAB_HOME>/artifacts/mlflow/<experiment>``; ``AIFAB_TRACKING_URI`` points at
any MLflow server or DB instead. Browse the default store with MLflow's own UI::

    mlflow ui --backend-store-uri sqlite:///.aifab/mlflow.db

Every call passes the URI to an explicit ``MlflowClient`` (never MLflow's global state), so
several workspaces can be used in one process. mlflow is imported inside functions only.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from aifab.core.actor import current_actor
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.track.client import (
    REMOTE_SCHEMES,
    artifact_root,
    check_name,
    flatten_params,
    get_client,
    tracking_uri,
    translate_error,
)
from aifab.track.codeversion import code_version, code_version_tags
from aifab.track.run import Run

_DATASET_KEYS = {"name", "ref", "digest", "source", "num_rows", "schema", "context"}

__all__ = [
    "Run",
    "check_name",
    "experiment_id",
    "flatten_params",
    "get_client",
    "resume_run",
    "run_env",
    "start_run",
    "tracking_uri",
    "translate_error",
]


def experiment_id(name: str, *, create: bool = True) -> str:
    """The id of experiment ``name``, creating it (with an explicit artifact root) if missing.

    Raises:
        NotFoundError: the experiment does not exist and ``create`` is False.
    """
    if not name.strip():
        raise InvalidInputError("experiment: a name is required")
    client = get_client()
    exp = client.get_experiment_by_name(name)
    if exp is None and not create:
        raise NotFoundError(f"experiment {name!r} not found")
    if exp is None:
        from mlflow.exceptions import MlflowException

        location = None  # a tracking server chooses its own artifact root
        if not tracking_uri().startswith(REMOTE_SCHEMES):
            slug = re.sub(r"[^\w.\-]+", "_", name).strip("._") or "experiment"
            location = artifact_root(slug)
        try:
            return str(client.create_experiment(name, artifact_location=location))
        except MlflowException as exc:  # another process may have created it first
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise translate_error(exc, f"experiment {name!r}") from None
    if exp.lifecycle_stage == "deleted" and create:
        client.restore_experiment(exp.experiment_id)
    return str(exp.experiment_id)


def _dataset_inputs(datasets: Sequence[Mapping[str, Any]]) -> list[Any]:
    """MLflow ``DatasetInput`` entities (with a context tag) for aifab dataset descriptions."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    from aifab.track.dataset_source import register

    register()  # MLflow readers in other processes find it through the entry point
    inputs = []
    for i, ds in enumerate(datasets):
        unknown = sorted(set(ds) - _DATASET_KEYS)
        missing = sorted(k for k in ("name", "ref", "digest") if not ds.get(k))
        if unknown or missing:
            bad = f"unknown keys {unknown}" if unknown else f"missing {missing}"
            raise InvalidInputError(f"datasets[{i}]: {bad}")
        source = {"ref": ds["ref"], "source": ds.get("source"), "digest": ds["digest"]}
        entity = Dataset(
            name=str(ds["name"]),
            digest=str(ds["digest"])[:36],  # MLflow caps digests at 36 chars; source has it all
            source_type="aifab",
            source=json.dumps(source),
            schema=json.dumps(ds.get("schema"), default=str),
            profile=json.dumps({"num_rows": ds.get("num_rows")}),
        )
        context = str(ds.get("context") or "training")
        tags = [InputTag("mlflow.data.context", context), InputTag("aifab.ref", str(ds["ref"]))]
        inputs.append(DatasetInput(entity, tags=tags))
    return inputs


def unique_run_name(experiment: str) -> str:
    """``<experiment>-<utc time>-<random hex>``.

    MLflow's own generated names draw on the ``random`` module, which recipes seed, so runs
    with one seed got the same name; this draws from ``secrets``.
    """
    slug = re.sub(r"[^\w.\-]+", "-", experiment).strip("-.")[:40] or "run"
    return f"{slug}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"


def _source_name() -> str:
    """What started the run, as MLflow's UI shows it: the command (``aifab``, a script)."""
    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return argv0 if argv0 and argv0 != "-c" else "aifab"


def start_run(
    experiment: str,
    *,
    run_name: str | None = None,
    params: Mapping[str, Any] | None = None,
    tags: Mapping[str, Any] | None = None,
    datasets: Sequence[Mapping[str, Any]] = (),
    system_metrics: bool = True,
) -> Run:
    """Start a run in ``experiment`` (created if missing).

    Args:
        experiment: experiment name.
        run_name: display name; a unique one (:func:`unique_run_name`) when None.
        params: the run's config; nested mappings are flattened to ``a.b`` keys.
        tags: extra tags; code version tags (git commit and dirty flag, aifab and package
            versions) are always added.
        datasets: dataset versions read, each ``{"name", "ref", "digest", "source",
            "num_rows", "schema", "context"}`` (context "training" unless given, e.g.
            "validation"); logged as MLflow dataset inputs.
        system_metrics: sample CPU/memory/GPU into ``system/*`` metrics (needs psutil).
    """
    inputs = _dataset_inputs(datasets)  # validate before creating anything
    flat = flatten_params(params or {})
    exp_id = experiment_id(experiment)
    all_tags = {
        "mlflow.user": current_actor(),
        "mlflow.source.type": "LOCAL",
        "mlflow.source.name": _source_name(),
        **code_version_tags(code_version()),
    }
    all_tags.update({str(k): v for k, v in (tags or {}).items()})
    client = get_client()
    mlflow_run = client.create_run(exp_id, run_name=run_name or unique_run_name(experiment))
    run = Run(client, mlflow_run.info.run_id, system_metrics=system_metrics)
    try:
        run.set_tags(all_tags)
        run.log_params(flat)
        if inputs:
            client.log_inputs(run.id, datasets=inputs)
    except BaseException:
        run.end("FAILED")
        raise
    return run


def resume_run(run_id: str, *, system_metrics: bool = True) -> Run:
    """Continue an existing run (a resumed job logs into the run it started); marks it RUNNING.

    Raises:
        NotFoundError: no run has this id.
    """
    from mlflow.exceptions import MlflowException

    client = get_client()
    try:
        client.update_run(run_id, status="RUNNING")
    except MlflowException as exc:
        raise translate_error(exc, f"run {run_id!r}") from None
    return Run(client, run_id, system_metrics=system_metrics, resumed=True)


def run_env(run: Run | str) -> dict[str, str]:
    """Environment for a child process that logs into ``run`` with plain MLflow calls."""
    run_id = run if isinstance(run, str) else run.id
    return {"MLFLOW_TRACKING_URI": tracking_uri(), "MLFLOW_RUN_ID": run_id}
