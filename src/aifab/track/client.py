"""MLflow clients (one per tracking URI), the store's location, limits and error translation.

The default store is an MLflow SQLite DB in the workspace (``<AIFAB_HOME>/mlflow.db``) with
artifacts under ``<AIFAB_HOME>/artifacts/mlflow/<experiment>``; ``AIFAB_TRACKING_URI`` points at
any MLflow server or DB instead. With ``AIFAB_STORAGE_URI`` set the artifact root is
``<store>/artifacts/mlflow`` (MLflow's own S3/GCS/Azure repositories write there), so a model
logged on one node is served from another. mlflow is imported inside functions only.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aifab.core.errors import AifabError, ConflictError, InvalidInputError, NotFoundError
from aifab.core.settings import get_settings
from aifab.core.storage import get_store
from aifab.core.workspace import get_workspace

if TYPE_CHECKING:
    from mlflow import MlflowClient

# MLflow's limits (mlflow.utils.validation): per log_batch call and per value.
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100
MAX_PARAM_LENGTH = 6000
MAX_TAG_LENGTH = 8000
MAX_KEY_LENGTH = 250
#: Seconds between background flushes, and the buffer size that triggers one early.
FLUSH_INTERVAL_S = 0.5
FLUSH_AT_POINTS = 5000

_CUT = "...(truncated)"
_NAME_RE = re.compile(r"^[/\w.\- :]*$")
REMOTE_SCHEMES = ("http://", "https://", "databricks")
_clients: dict[str, MlflowClient] = {}
_lock = threading.Lock()
_log = logging.getLogger(__name__)


def tracking_uri() -> str:
    """The MLflow tracking (and registry) URI: ``AIFAB_TRACKING_URI`` or the workspace DB."""
    configured = get_settings().tracking_uri
    if configured:
        return configured
    return f"sqlite:///{get_workspace().root / 'mlflow.db'}"


def artifact_root(experiment: str = "") -> str:
    """Where MLflow artifacts of ``experiment`` (a slug; empty: the root) go, as MLflow's URI.

    The workspace's ``artifacts/mlflow`` directory, or the same key on the object store.
    """
    key = "artifacts/mlflow" + (f"/{experiment}" if experiment else "")
    store = get_store()
    if store.is_local:
        return str(get_workspace().root / key)
    return store.url(key)


def get_client(uri: str | None = None) -> MlflowClient:
    """The cached client for ``uri`` (default :func:`tracking_uri`), for tracking and registry.

    The first client of a fresh SQLite store creates MLflow's schema, which takes seconds.
    """
    uri = uri or tracking_uri()
    with _lock:
        client = _clients.get(uri)
        if client is None:
            # Downloads must not draw progress bars over CLI output; schema creation and system
            # metrics log chatty INFO lines.
            os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
            for name in (
                "mlflow.store.db.utils",
                "mlflow.system_metrics.system_metrics_monitor",
                "alembic.runtime.migration",
            ):
                logging.getLogger(name).setLevel(logging.WARNING)
            from mlflow import MlflowClient

            _init_db_store(uri)
            client = _clients[uri] = MlflowClient(tracking_uri=uri, registry_uri=uri)
    return client


def translate_error(exc: Exception, what: str) -> AifabError:
    """Map an MLflow exception to the aifab error users act on; ``what`` names the object."""
    code = str(getattr(exc, "error_code", ""))
    lines = str(getattr(exc, "message", exc)).strip().splitlines()
    first = lines[0] if lines else type(exc).__name__
    if code == "RESOURCE_DOES_NOT_EXIST":
        return NotFoundError(f"{what} not found")
    if code == "RESOURCE_ALREADY_EXISTS":
        return ConflictError(f"{what}: {first}")
    if code == "INVALID_PARAMETER_VALUE":
        return InvalidInputError(f"{what}: {first}")
    return AifabError(f"{what}: tracking store error: {first}")


def check_name(name: str, kind: str) -> str:
    """Validate a metric/param/tag key against MLflow's rules; InvalidInputError naming it."""
    if not isinstance(name, str) or not name or len(name) > MAX_KEY_LENGTH:
        raise InvalidInputError(f"{kind} name {name!r}: must be 1-{MAX_KEY_LENGTH} characters")
    norm = posixpath.normpath(name)
    if not _NAME_RE.fullmatch(name) or norm != name or norm.startswith(("..", "/")):
        raise InvalidInputError(
            f"{kind} name {name!r}: use letters, digits, _ - . : / and spaces, "
            "no leading '/', '..' or '//'"
        )
    return name


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Flatten nested configs to ``{"optimizer.lr": "0.001"}`` with MLflow-sized values.

    Lists become JSON; values longer than MLflow's limit are cut with a visible marker.
    """
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if hasattr(value, "model_dump"):
            value = value.model_dump(mode="json")
        if isinstance(value, Mapping) and value:
            flat.update(flatten_params(value, f"{name}."))
            continue
        text = json.dumps(value, default=str) if isinstance(value, list | tuple) else str(value)
        if len(text) > MAX_PARAM_LENGTH:
            text = text[: MAX_PARAM_LENGTH - len(_CUT)] + _CUT
        flat[check_name(name, "param")] = text
    return flat


_DB_SCHEMES = ("sqlite:", "postgresql", "mysql", "mssql")


def _init_db_store(uri: str) -> None:
    """Create a database store's schema with the workspace's artifact root.

    A fresh store makes its ``Default`` experiment with the root it is opened with; a client
    would open it with ``./mlruns`` in the current directory.
    """
    if not uri.startswith(_DB_SCHEMES):
        return
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    root = artifact_root()
    if get_store().is_local:
        os.makedirs(root, exist_ok=True)
    SqlAlchemyStore(uri, root).engine.dispose()
