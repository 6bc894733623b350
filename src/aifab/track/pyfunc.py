"""The pyfunc face of a registered aifab model: raw records in, what ``/v1/predict`` returns out.

``mlflow.pyfunc.load_model("models:/churn@champion")`` unpickles :class:`AifabPythonModel` (by
reference: this module must be importable) and loads the aifab model directory shipped in the
MLflow model's artifacts with aifab's own handler, so MLflow's loaders, ``mlflow models serve``
and aifab's server answer alike.
"""

from __future__ import annotations

import json
from typing import Any

from mlflow.pyfunc import PythonModel

from aifab.core.registry import load_target

#: The artifact key of the aifab model directory inside an MLflow model.
ARTIFACT_KEY = "model"
#: aifab's loader, reached by name: ``track`` sits below ``inference`` and never imports it.
LOADER = "aifab.inference.loading:load_model_directory"


def records_of(model_input: Any) -> list[dict[str, Any]]:
    """JSON-native records of a DataFrame, a list of records or one record.

    A DataFrame goes through JSON so its numpy scalars, NaN and timestamps reach the handler as
    the same values an HTTP request would carry.
    """
    if hasattr(model_input, "to_json"):
        return list(json.loads(model_input.to_json(orient="records", date_format="iso")))
    if isinstance(model_input, dict):
        return [model_input]
    return [dict(r) for r in model_input]


class AifabPythonModel(PythonModel):
    """aifab's handler behind MLflow's pyfunc interface (classifiers, LMs, embedders)."""

    # MLflow would wrap ``predict`` to validate inputs against its type hints, and warns (in
    # red, on every registration and load) that ``Any`` is no such hint: the model's signature
    # already does the validating, so the wrapping is skipped, and with it the warning.
    _skip_type_hint_validation = True

    def load_context(self, context: Any) -> None:
        """Load the aifab model directory with the handler its sidecar names."""
        loaded = load_target(LOADER)(str(context.artifacts[ARTIFACT_KEY]))
        self.handler = loaded.handler
        self.kind = str(loaded.handler.kind)

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
        records = records_of(model_input)
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
