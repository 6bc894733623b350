"""Explanations of multimodal classifiers: each modality's share of a prediction.

Exact Shapley values over the model's modalities (image, text, fields: at most 8 coalitions
per record), where a left-out modality is "nothing there" (a grey image, an empty text, the
fields' training mean). The shares sum to the predicted class's probability minus its
probability with every modality left out.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import numpy as np

from aifab.core.errors import InvalidInputError
from aifab.core.settings import get_settings
from aifab.inference.classifier import ClassifierHandler
from aifab.inference.multimodal import absent_inputs
from aifab.models.checkpoint import read_sidecar
from aifab.ops.explain.model import softmax
from aifab.track.registry import download_model, resolve_model

__all__ = ["explain_modalities", "is_multimodal", "modality_shapley"]


def is_multimodal(ref: str) -> bool:
    """Whether model version ``ref`` is a multimodal (fusion) classifier."""
    sidecar = read_sidecar(download_model(_key(ref)))
    return ((sidecar.get("meta") or {}).get("preprocess") or {}).get("modality") == "multimodal"


def _key(ref: str) -> str:
    mv = resolve_model(ref)
    return f"{mv['name']}@{mv['version']}"


def _handler(key: str) -> ClassifierHandler:
    # Keyed by workspace too: the same name@version in another workspace is another model.
    return _load_handler(str(get_settings().resolved_home), key)


@functools.lru_cache(maxsize=4)
def _load_handler(home: str, key: str) -> ClassifierHandler:
    model_dir = download_model(key)
    handler = ClassifierHandler()
    handler.setup(model_dir, read_sidecar(model_dir), {"backend": "torch", "threads": 1})
    return handler


def modality_shapley(handler: ClassifierHandler, records: list[dict[str, Any]]) -> list[dict]:
    """Per decoded record: ``label``, ``value``, ``base`` and per-modality ``contributions``.

    Args:
        handler: A set-up classifier handler of a multimodal model.
        records: Records as ``handler.decode`` returned them.
    """
    mods = list(handler.input_modalities)
    inputs = handler.encode_inputs(records)
    n = len(mods)
    proba: dict[frozenset[str], np.ndarray] = {}
    for size in range(n + 1):
        for kept in itertools.combinations(mods, size):
            x = inputs
            for m in mods:
                if m not in kept:
                    x = absent_inputs(x, m)
            proba[frozenset(kept)] = softmax(handler.forward(x))
    full = proba[frozenset(mods)]
    labels = full.argmax(axis=1)
    out = []
    for i, k in enumerate(labels.tolist()):
        contributions: list[dict[str, Any]] = []
        for m in mods:
            others = [o for o in mods if o != m]
            phi = 0.0
            for size in range(n):
                weight = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
                for s in itertools.combinations(others, size):
                    with_m = proba[frozenset((*s, m))][i, k]
                    phi += weight * float(with_m - proba[frozenset(s)][i, k])
            contributions.append({"modality": m, "contribution": phi})
        contributions.sort(key=lambda c: -abs(c["contribution"]))
        out.append(
            {
                "label": handler.classes[k],
                "value": float(full[i, k]),
                "base": float(proba[frozenset()][i, k]),
                "contributions": contributions,
            }
        )
    return out


def explain_modalities(ref: str, records: Any, *, max_records: int = 100) -> dict[str, Any]:
    """Explain model version ``ref``'s predictions for raw ``records`` by modality.

    Raises:
        InvalidInputError: bad records (row and field named), or more than ``max_records``.
        NotFoundError: an unknown model version.
    """
    if not isinstance(records, list) or not records:
        raise InvalidInputError("records: expected a non-empty list of objects")
    key = _key(ref)
    handler = _handler(key)
    decoded = handler.decode({"records": records})
    if len(decoded) > max_records:
        raise InvalidInputError(f"records: at most {max_records} per call, got {len(decoded)}")
    return {"model": key, "method": "modality", "explanations": modality_shapley(handler, decoded)}
