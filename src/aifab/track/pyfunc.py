"""The pyfunc face of a registered aifab model: raw records in, what ``/v1/predict`` returns out.

``mlflow.pyfunc.load_model("models:/churn@champion")`` unpickles :class:`AifabPythonModel` (by
reference: this module must be importable) and loads the aifab model directory shipped in the
MLflow model's artifacts with aifab's own handler, so MLflow's loaders, ``mlflow models serve``
and aifab's server answer alike.
"""

from __future__ import annotations

import json
from typing import Any

from mlflow.models.signature import _TypeHints
from mlflow.pyfunc import PythonModel

from aifab.core.registry import load_target

#: The artifact key of the aifab model directory inside an MLflow model.
ARTIFACT_KEY = "model"
#: aifab's loader, reached by name: ``track`` sits below ``inference`` and never imports it.
LOADER = "aifab.inference.loading:load_model_directory"


def records_of(model_input: Any, dates: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """JSON-native records of a DataFrame, a list of records or one record.

    A DataFrame goes through JSON so its numpy scalars, NaN and timestamps reach the handler as
    the same values an HTTP request would carry. Its ``dates`` columns, parsed as pandas,
    polars or Arrow parse them (datetime64 of any unit, ``datetime.date`` objects), become
    ``YYYY-MM-DD`` text, as ``/v1/predict`` takes dates.
    """
    if hasattr(model_input, "to_json"):
        frame = _dates_as_text(model_input, dates)
        return list(json.loads(frame.to_json(orient="records", date_format="iso")))
    if isinstance(model_input, dict):
        return [model_input]
    return [dict(r) for r in model_input]


def _dates_as_text(frame: Any, dates: frozenset[str]) -> Any:
    import datetime as dt

    import pandas as pd

    changed = {}
    for name in dates.intersection(frame.columns):
        col = frame[name]
        if pd.api.types.is_datetime64_any_dtype(col):
            changed[name] = col.dt.strftime("%Y-%m-%d").astype(object).where(col.notna(), None)
        elif col.dtype == object:
            changed[name] = col.map(
                lambda v: v.isoformat()[:10] if isinstance(v, dt.date) else v
            ).astype(object)
    return frame.assign(**changed) if changed else frame


class AifabPythonModel(PythonModel):
    """aifab's handler behind MLflow's pyfunc interface (classifiers, LMs, embedders)."""

    # MLflow would wrap ``predict`` to validate inputs against its type hints, and warns (in
    # red, on every registration and load) that ``Any`` is no such hint: the model's signature
    # already does the validating, so the wrapping is skipped, and with it the warning.
    _skip_type_hint_validation = True
    # For the same reason MLflow must find no hints to infer a signature from at save time (it
    # warns that ``Any`` gives none): the signature is passed explicitly.
    _predict_type_hints = _TypeHints()

    def load_context(self, context: Any) -> None:
        """Load the aifab model directory with the handler its sidecar names."""
        loaded = load_target(LOADER)(str(context.artifacts[ARTIFACT_KEY]))
        self.handler = loaded.handler
        self.kind = str(loaded.handler.kind)
        columns = loaded.handler.describe().get("input_columns") or []
        self.dates = frozenset(c["name"] for c in columns if c.get("type") == "date")

    def predict(
        self, context: Any, model_input: Any, params: dict[str, Any] | None = None
    ) -> list[Any]:
        """One output per input row, as ``/v1/predict`` (or the LM route) encodes it.

        Args:
            context: MLflow's context (unused after loading).
            model_input: Classifier: records of the model's input columns. LM: rows with a
                ``prompt`` column. Embeddings: rows with an ``input`` column.
            params: LM generation parameters (``max_tokens``, ``temperature``, ...).
        """
        records = records_of(model_input, getattr(self, "dates", frozenset()))
        if self.kind == "classifier":
            payload: dict[str, Any] = {"records": records}
        elif self.kind == "lm":
            extra = {k: v for k, v in (params or {}).items() if v is not None}
            payload = {"prompt": [str(r["prompt"]) for r in records], **extra}
        else:
            payload = {"input": [str(r["input"]) for r in records]}
        handler = self.handler
        items = handler.decode(payload)
        return [handler.encode(o) for o in handler.predict(items)]
