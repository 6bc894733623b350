"""Reading runs back: list, show (params, metrics, tags, dataset inputs, artifacts), compare."""

from __future__ import annotations

import json
import posixpath
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.core.workspace import get_workspace
from aifab.track.tracking import experiment_id, get_client, translate_error

#: Listing artifacts stops after this many entries (a run may log thousands of files).
MAX_ARTIFACTS = 1000
#: :func:`read_artifact` reads files up to this size.
MAX_ARTIFACT_BYTES = 4 * 1024 * 1024


def _seconds(ms: int | None) -> float | None:
    return ms / 1000.0 if ms else None


def _summary(run: Any, experiments: dict[str, str]) -> dict[str, Any]:
    info = run.info
    start, end = _seconds(info.start_time), _seconds(info.end_time)
    return {
        "id": info.run_id,
        "experiment": experiments.get(info.experiment_id, info.experiment_id),
        "name": info.run_name,
        "status": info.status,
        "start_time": start,
        "end_time": end,
        "duration_s": round(end - start, 3) if start and end else None,
        "metrics": dict(run.data.metrics),
    }


#: Runs scanned for an abbreviated run id (newest first): a prefix names a recent run.
PREFIX_SCAN = 5000


def _fetch(run_id: str) -> Any:
    from mlflow.exceptions import MlflowException

    try:
        return get_client().get_run(run_id)
    except MlflowException as exc:
        full = _complete(run_id)
        if full is None:
            raise translate_error(exc, f"run {run_id!r}") from None
    return get_client().get_run(full)


def _complete(prefix: str) -> str | None:
    """The one recent run whose id starts with ``prefix`` (as git takes short hashes).

    Raises:
        InvalidInputError: several runs start with it.
    """
    if len(prefix) < 4 or not prefix.isalnum():
        return None
    client = get_client()
    ids = [e.experiment_id for e in client.search_experiments()]
    if not ids:
        return None
    runs = client.search_runs(ids, max_results=PREFIX_SCAN, order_by=["attributes.start_time DESC"])
    found = sorted({r.info.run_id for r in runs if r.info.run_id.startswith(prefix)})
    if len(found) > 1:
        raise InvalidInputError(f"run {prefix!r} is ambiguous: it starts {', '.join(found[:5])}")
    return found[0] if found else None


def list_runs(
    experiment: str | None = None, limit: int = 50, offset: int = 0
) -> list[dict[str, Any]]:
    """Newest runs first, across experiments or in one; ``offset`` skips the newest ones.

    The store pages in its own query (MLflow's page token), so a page deep into 10k runs
    reads only that page's runs.

    Raises:
        InvalidInputError: ``limit`` under 1 or ``offset`` under 0.
        NotFoundError: ``experiment`` does not exist.
    """
    if limit < 1:
        raise InvalidInputError(f"limit: must be at least 1, got {limit}")
    if offset < 0:
        raise InvalidInputError(f"offset: must be at least 0, got {offset}")
    client = get_client()
    experiments = {e.experiment_id: e.name for e in client.search_experiments()}
    ids = [experiment_id(experiment, create=False)] if experiment else list(experiments)
    if not ids:
        return []
    runs = client.search_runs(
        ids,
        max_results=limit,
        order_by=["attributes.start_time DESC"],
        page_token=_page_token(offset),
    )
    return [_summary(r, experiments) for r in runs]


def _page_token(offset: int) -> str | None:
    """MLflow's page token for the page starting at ``offset`` (its stores read an offset)."""
    if offset == 0:
        return None
    from mlflow.utils.search_utils import SearchUtils

    token: bytes = SearchUtils.create_page_token(offset)
    return token.decode()


def metric_history(run_id: str, key: str) -> list[dict[str, Any]]:
    """Every logged point of metric ``key``, ordered by step then time."""
    from mlflow.exceptions import MlflowException

    try:
        points = get_client().get_metric_history(run_id, key)
    except MlflowException as exc:
        raise translate_error(exc, f"run {run_id!r}") from None
    rows = [{"step": m.step, "value": m.value, "timestamp": m.timestamp} for m in points]
    return sorted(rows, key=lambda r: (r["step"], r["timestamp"]))


def read_artifact(run_id: str, path: str, max_bytes: int = MAX_ARTIFACT_BYTES) -> bytes:
    """The content of one artifact file of a run (e.g. ``exports/card/card.json``).

    Raises:
        NotFoundError: no such run or artifact.
        InvalidInputError: the file is over ``max_bytes``.
    """
    from mlflow.exceptions import MlflowException

    parent = posixpath.dirname(path.strip("/")) or None
    try:
        entries = {e.path: e for e in get_client().list_artifacts(run_id, parent)}
    except MlflowException as exc:
        raise translate_error(exc, f"run {run_id!r}") from None
    entry = entries.get(path.strip("/"))
    if entry is None or entry.is_dir:
        raise NotFoundError(f"run {run_id} has no artifact file {path!r}")
    if entry.file_size is not None and entry.file_size > max_bytes:
        raise InvalidInputError(f"artifact {path!r}: {entry.file_size} bytes is over {max_bytes}")
    with tempfile.TemporaryDirectory(prefix="artifact-", dir=get_workspace().tmp) as scratch:
        local = Path(get_client().download_artifacts(run_id, path.strip("/"), scratch))
        return local.read_bytes()[: max_bytes + 1]


def _artifacts(run_id: str) -> list[dict[str, Any]]:
    """The run's artifact files (recursively), as ``{"path", "size"}``."""
    client = get_client()
    files: list[dict[str, Any]] = []
    pending: list[str | None] = [None]
    while pending and len(files) < MAX_ARTIFACTS:
        for entry in client.list_artifacts(run_id, pending.pop()):
            if entry.is_dir:
                pending.append(entry.path)
            else:
                files.append({"path": entry.path, "size": entry.file_size})
    return sorted(files, key=lambda f: f["path"])[:MAX_ARTIFACTS]


def _datasets(run: Any) -> list[dict[str, Any]]:
    """The run's dataset inputs with their aifab ref and context (training, validation...)."""
    out = []
    for item in run.inputs.dataset_inputs if run.inputs else []:
        ds = item.dataset
        tags = {t.key: t.value for t in item.tags}
        try:
            source = json.loads(ds.source) if ds.source_type == "aifab" else {"uri": ds.source}
            profile = json.loads(ds.profile) if ds.profile else {}
        except json.JSONDecodeError:
            source, profile = {"uri": ds.source}, {}
        out.append(
            {
                "name": ds.name,
                "ref": tags.get("aifab.ref") or source.get("ref"),
                "context": tags.get("mlflow.data.context"),
                "digest": source.get("digest") or ds.digest,
                "source": source.get("source") or source.get("uri"),
                "num_rows": profile.get("num_rows"),
            }
        )
    return out


def get_run(run_id: str, *, history: bool = False) -> dict[str, Any]:
    """Everything about one run.

    Args:
        run_id: the MLflow run id.
        history: also return every point of every metric (``metric_history``).

    Returns:
        The run summary plus ``params``, ``tags``, ``datasets``, ``artifacts``, ``artifact_uri``
        and, with ``history``, ``metric_history`` (key -> points).

    Raises:
        NotFoundError: no run has this id.
    """
    run = _fetch(run_id)
    run_id = run.info.run_id  # what the caller typed may be a prefix
    exp = get_client().get_experiment(run.info.experiment_id)
    out = _summary(run, {exp.experiment_id: exp.name})
    out.update(
        params=dict(run.data.params),
        tags=dict(run.data.tags),
        datasets=_datasets(run),
        artifact_uri=run.info.artifact_uri,
        artifacts=_artifacts(run_id),
    )
    if history:
        out["metric_history"] = {k: metric_history(run_id, k) for k in sorted(run.data.metrics)}
    return out


def compare_runs(run_ids: Sequence[str]) -> dict[str, Any]:
    """Runs side by side: the params that differ and every final metric.

    Returns:
        ``{"runs": [summary...], "params": {key: [value per run]}, "same_params": int,
        "metrics": {key: [value per run]}}`` (None where a run lacks the key).

    Raises:
        InvalidInputError: fewer than two distinct ids.
    """
    ids = list(dict.fromkeys(run_ids))
    if len(ids) < 2:
        raise InvalidInputError("compare: give at least two different run ids")
    runs = [_fetch(i) for i in ids]
    client = get_client()
    experiments = {e: client.get_experiment(e).name for e in {r.info.experiment_id for r in runs}}
    param_keys = sorted({k for r in runs for k in r.data.params})
    params = {k: [r.data.params.get(k) for r in runs] for k in param_keys}
    differ = {k: v for k, v in params.items() if len(set(v)) > 1}
    metric_keys = sorted({k for r in runs for k in r.data.metrics})
    return {
        "runs": [
            {k: v for k, v in _summary(r, experiments).items() if k != "metrics"} for r in runs
        ],
        "params": differ,
        "same_params": len(params) - len(differ),
        "metrics": {k: [r.data.metrics.get(k) for r in runs] for k in metric_keys},
    }
