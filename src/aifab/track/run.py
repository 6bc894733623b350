"""A tracked run: buffered, non-blocking metric logging flushed by a background thread."""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from aifab.core.errors import AifabError, ConflictError, InvalidInputError, NotFoundError
from aifab.track.client import (
    FLUSH_AT_POINTS,
    FLUSH_INTERVAL_S,
    MAX_METRICS_PER_BATCH,
    MAX_PARAMS_TAGS_PER_BATCH,
    MAX_TAG_LENGTH,
    check_name,
    flatten_params,
    translate_error,
)

if TYPE_CHECKING:
    from mlflow import MlflowClient

_live_runs: weakref.WeakSet[Run] = weakref.WeakSet()
_log = logging.getLogger(__name__)


class Run:
    """One MLflow run. ``log_metrics`` only appends to a buffer; a thread writes batches.

    Use as a context manager (status FAILED when the block raises) or call :meth:`end`.
    """

    def __init__(
        self,
        client: MlflowClient,
        run_id: str,
        *,
        system_metrics: bool = True,
        resumed: bool = False,
    ) -> None:
        self.id = run_id
        self._client = client
        self._buffer: list[tuple[str, float, int, int]] = []
        self._buffer_lock = threading.Lock()
        self._known: set[str] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._lost = 0
        self._ended = False
        self._flusher = threading.Thread(target=self._flush_loop, name=f"aifab-metrics-{run_id}")
        self._flusher.daemon = True  # an un-ended run must not block exit; atexit flushes it
        self._flusher.start()
        self._monitor = _system_monitor(client, run_id, resumed) if system_metrics else None
        _live_runs.add(self)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Buffer ``metrics`` at ``step`` (returns at once; a background thread writes them)."""
        if self._ended:
            raise ConflictError(f"run {self.id} has ended; resume_run() it to log more")
        ts = time.time_ns() // 1_000_000
        known = self._known
        points = []
        for key, value in metrics.items():
            if key not in known:
                known.add(check_name(key, "metric"))
            try:
                points.append((key, float(value), ts, step))
            except (TypeError, ValueError):
                raise InvalidInputError(f"metric {key!r}: {value!r} is not a number") from None
        with self._buffer_lock:
            self._buffer.extend(points)
            if len(self._buffer) >= FLUSH_AT_POINTS:
                self._wake.set()

    def _flush_loop(self) -> None:
        while True:
            stopping = self._stop.is_set()
            self._flush()
            if stopping:
                return
            self._wake.wait(FLUSH_INTERVAL_S)
            self._wake.clear()

    def _flush(self) -> None:
        from mlflow.entities import Metric

        with self._buffer_lock:
            points, self._buffer = self._buffer, []
        for start in range(0, len(points), MAX_METRICS_PER_BATCH):
            chunk = points[start : start + MAX_METRICS_PER_BATCH]
            try:
                self._client.log_batch(self.id, metrics=[Metric(*p) for p in chunk])
            except Exception as exc:  # noqa: BLE001 - kept and raised by end()
                _log.warning("run %s: %d metric points not written: %s", self.id, len(chunk), exc)
                self._error = self._error or exc
                self._lost += len(chunk)

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log params (nested configs flattened to dotted keys).

        Raises:
            ConflictError: a param was already logged with a different value.
        """
        from mlflow.entities import Param

        self._write(params=[Param(k, v) for k, v in flatten_params(params).items()])

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Set tags (values converted to strings and cut to MLflow's limit)."""
        from mlflow.entities import RunTag

        tag = [RunTag(check_name(str(k), "tag"), str(v)[:MAX_TAG_LENGTH]) for k, v in tags.items()]
        self._write(tags=tag)

    def _write(self, params: Sequence[Any] = (), tags: Sequence[Any] = ()) -> None:
        from mlflow.exceptions import MlflowException

        n = MAX_PARAMS_TAGS_PER_BATCH
        for i in range(0, max(len(params), len(tags)), n):
            try:
                self._client.log_batch(self.id, params=params[i : i + n], tags=tags[i : i + n])
            except MlflowException as exc:
                err = translate_error(exc, f"run {self.id}")
                if "Changing param values is not allowed" in str(exc):
                    err = ConflictError(
                        f"run {self.id}: a param was already logged with another value "
                        f"({err.message})"
                    )
                raise err from None

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Copy a local file into the run's artifacts (under ``artifact_path`` if given)."""
        self._client.log_artifact(self.id, str(_existing(path)), artifact_path)

    def log_artifacts(self, directory: str | Path, artifact_path: str | None = None) -> None:
        """Copy a local directory's contents into the run's artifacts."""
        self._client.log_artifacts(self.id, str(_existing(directory)), artifact_path)

    def log_dict(self, obj: Any, filename: str) -> None:
        """Write ``obj`` as a JSON (``.json``) or YAML (``.yaml``) artifact named ``filename``."""
        self._client.log_dict(self.id, obj, filename)

    def flush(self) -> None:
        """Write buffered metrics now (from the calling thread)."""
        self._flush()

    def end(self, status: str = "FINISHED") -> None:
        """Flush metrics, stop the threads and mark the run ``status`` (no-op when ended).

        Raises:
            AifabError: some metric points could not be written (the run is still ended).
        """
        if self._ended:
            return
        self._ended = True
        self._stop.set()
        self._wake.set()
        self._flusher.join()
        if self._monitor is not None:
            self._monitor.finish()
        _live_runs.discard(self)
        from mlflow.exceptions import MlflowException

        try:
            self._client.set_terminated(self.id, status=status)
        except MlflowException as exc:
            if self._error is None:  # else the lost metrics are the news (same cause, likely)
                raise translate_error(exc, f"run {self.id}") from None
        if self._error is not None:
            raise AifabError(
                f"run {self.id}: {self._lost} metric points were not written: {self._error}"
            )

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.end("FINISHED")
            return
        status = "KILLED" if issubclass(exc_type, KeyboardInterrupt) else "FAILED"
        try:
            self.end(status)
        except AifabError as err:  # the block's own exception is the one to show
            _log.warning("%s", err)


def _existing(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise NotFoundError(f"artifact {p} not found")
    return p


def _system_monitor(client: MlflowClient, run_id: str, resumed: bool) -> Any:
    """MLflow's CPU/memory/GPU sampler for the run, or None when psutil is not installed."""
    try:
        import psutil  # noqa: F401  (MLflow's monitors need it)
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor
    except ImportError:
        return None
    monitor = SystemMetricsMonitor(run_id, resume_logging=resumed, tracking_uri=client.tracking_uri)
    monitor.start()
    return monitor


@atexit.register
def _flush_open_runs() -> None:
    # Runs never ended still get their buffered metrics written (status stays as it is).
    for run in list(_live_runs):
        run.flush()
