"""Model lineage: model version -> training run -> dataset versions -> their catalog ancestry.

The dataset versions are the run's MLflow dataset inputs; ancestry is ``aifab.data.lineage``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aifab.core.errors import NotFoundError

#: Params shown by default: what most often explains a model (data, model, optimization).
DEFAULT_PARAM_KEYS = (
    "recipe",
    "dataset",
    "label",
    "features",
    "model.name",
    "base_model",
    "epochs",
    "max_steps",
    "batch_size",
    "optim.lr",
    "optim.weight_decay",
    "seed",
    "strategy",
)


def model_lineage(
    ref: str, *, param_keys: Sequence[str] | None = DEFAULT_PARAM_KEYS
) -> dict[str, Any]:
    """Where a model came from.

    Args:
        ref: ``NAME``, ``NAME@VERSION`` or ``NAME@ALIAS``.
        param_keys: run params to include (None: all of them).

    Returns:
        ``{"model": {name, version, aliases, source}, "run": {id, experiment, status, params,
        metrics}, "datasets": [{ref, digest, context, lineage}]}``; ``lineage`` is
        :func:`aifab.data.lineage` of the version, or None (with ``missing: True``) when the
        catalog no longer has it. ``run`` is None for a version registered without a run.

    Raises:
        NotFoundError: the model, version or alias does not exist.
    """
    from aifab.data.browse import lineage as data_lineage
    from aifab.track.registry import resolve_model
    from aifab.track.runs import get_run

    mv = resolve_model(ref)
    out: dict[str, Any] = {
        "model": {
            "name": mv["name"],
            "version": mv["version"],
            "aliases": mv["aliases"],
            "source": mv["source"],
        },
        "run": None,
        "datasets": [],
    }
    if not mv.get("run_id"):
        return out
    run = get_run(mv["run_id"])
    params = run["params"]
    if param_keys is not None:
        params = {k: params[k] for k in param_keys if k in params}
    out["run"] = {
        "id": run["id"],
        "experiment": run["experiment"],
        "status": run["status"],
        "params": params,
        "metrics": run["metrics"],
    }
    for ds in run["datasets"]:
        entry: dict[str, Any] = {
            "ref": ds["ref"],
            "digest": ds["digest"],
            "context": ds.get("context"),
            "lineage": None,
        }
        try:
            entry["lineage"] = data_lineage(ds["ref"]) if ds["ref"] else None
        except NotFoundError:
            entry["missing"] = True
        out["datasets"].append(entry)
    return out
