"""Forward lineage in the tracking store: the runs that read dataset versions, their models.

:mod:`aifab.track.runs` walks back from a run to its dataset inputs; these walk forward, so a
dataset version's lineage graph can reach the runs, model versions (and deployments) built on it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from aifab.core.errors import InvalidInputError
from aifab.track.registry import _version_dict
from aifab.track.runs import _datasets, _summary
from aifab.track.tracking import get_client

__all__ = ["model_versions_of_runs", "runs_reading"]

#: MLflow keeps at most this many characters of a dataset digest.
_DIGEST_CHARS = 36
_TOKEN = re.compile(r"[0-9A-Za-z_-]+")


def _in_list(values: Sequence[str], what: str) -> str:
    """``('a', 'b')`` for a search filter; values are checked, never quoted blindly."""
    for value in values:
        if not _TOKEN.fullmatch(value):
            raise InvalidInputError(f"{what} {value!r}: only letters, digits, '_' and '-'")
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


def runs_reading(digests: Sequence[str], limit: int = 100) -> list[dict[str, Any]]:
    """Runs (newest first) whose dataset inputs have one of these dataset content hashes.

    Args:
        digests: dataset versions' content hashes (``VersionInfo.content_hash``).
        limit: at most this many runs.

    Returns:
        The run summaries of :func:`aifab.track.list_runs`, each with ``params`` and
        ``datasets`` (its dataset inputs: ``ref``, ``digest``, ``context``...).

    Raises:
        InvalidInputError: a digest that is not a hash, or a limit under 1.
    """
    if limit < 1:
        raise InvalidInputError(f"limit: must be at least 1, got {limit}")
    wanted = sorted({d[:_DIGEST_CHARS] for d in digests if d})
    if not wanted:
        return []
    client = get_client()
    experiments = {e.experiment_id: e.name for e in client.search_experiments()}
    if not experiments:
        return []
    runs = client.search_runs(
        list(experiments),
        filter_string=f"dataset.digest IN {_in_list(wanted, 'digest')}",
        max_results=limit,
        order_by=["attributes.start_time DESC"],
    )
    return [
        {**_summary(r, experiments), "params": dict(r.data.params), "datasets": _datasets(r)}
        for r in runs
    ]


def model_versions_of_runs(run_ids: Sequence[str], limit: int = 200) -> list[dict[str, Any]]:
    """Registered model versions (newest first) logged from any of these runs.

    Raises:
        InvalidInputError: a run id that is not one.
    """
    ids = sorted(set(run_ids))
    if not ids:
        return []
    found = get_client().search_model_versions(
        f"run_id IN {_in_list(ids, 'run id')}", max_results=limit
    )
    return sorted((_version_dict(mv) for mv in found), key=lambda v: (v["name"], -v["version"]))
