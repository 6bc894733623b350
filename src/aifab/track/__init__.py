"""Layer 1, track: experiment runs, batched metrics, artifacts and the model registry on MLflow.

The only aifab package that imports mlflow, and only inside functions, so importing this
package is cheap. ``mlflow ui --backend-store-uri sqlite:///.aifab/mlflow.db`` shows the runs.
"""

from __future__ import annotations

from aifab.track.codeversion import code_version
from aifab.track.registry import (
    download_model,
    list_models,
    list_versions,
    register_model,
    resolve_model,
    set_alias,
)
from aifab.track.runs import compare_runs, get_run, list_runs, metric_history, read_artifact
from aifab.track.tracking import Run, get_client, resume_run, run_env, start_run, tracking_uri
from aifab.track.usage import model_versions_of_runs, runs_reading

__all__ = [
    "Run",
    "code_version",
    "compare_runs",
    "download_model",
    "get_client",
    "get_run",
    "list_models",
    "list_runs",
    "list_versions",
    "metric_history",
    "model_versions_of_runs",
    "read_artifact",
    "register_model",
    "resolve_model",
    "resume_run",
    "run_env",
    "runs_reading",
    "set_alias",
    "start_run",
    "tracking_uri",
]
