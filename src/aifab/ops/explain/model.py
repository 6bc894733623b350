"""A registered tabular classifier loaded for explaining: its handler and background rows.

Explanations speak in raw-feature terms (what a client sends), so the model is the serving
handler (``decode`` -> ``encode_inputs`` -> ``forward``) and the background is drawn from the
rows training held out (its test split), decoded as requests are.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import date, datetime
from datetime import time as dtime
from decimal import Decimal
from typing import Any

import numpy as np

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.core.settings import get_settings
from aifab.inference.classifier import ClassifierHandler
from aifab.inference.evaluation import test_split
from aifab.models.checkpoint import read_sidecar
from aifab.track.registry import download_model, resolve_model

__all__ = ["TabularModel", "dataset_rows", "load_tabular", "one_class_warning", "softmax"]

#: Background rows drawn from the test split (SHAP's "background data").
BACKGROUND_ROWS = 8
_CACHE_SIZE = 4
_cache: OrderedDict[str, TabularModel] = OrderedDict()
_lock = threading.Lock()


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64."""
    z = logits.astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


def one_class_warning(predicted: np.ndarray, where: str) -> str | None:
    """A warning when every row of ``where`` got the same predicted class, else None.

    Equal selection rates across groups and permutation importances of 0 then say that the
    model ignores its inputs, not that it is fair or that no feature matters.
    """
    values = set(np.asarray(predicted).tolist())
    if len(predicted) < 2 or len(values) != 1:
        return None
    return (
        f"the model predicts {values.pop()!r} for all {len(predicted)} rows of {where}: "
        "equal group rates and zero importances mean it ignores its inputs, not that it is fair"
    )


@dataclass
class TabularModel:
    """A tabular classifier ready to explain."""

    ref: str
    handler: ClassifierHandler
    #: Raw input columns, in the model's order (the features explanations name).
    columns: list[str]
    classes: list[str]
    #: Decoded background records (at most :data:`BACKGROUND_ROWS`).
    background: list[dict[str, Any]]
    #: The test split's decoded records and labels (for permutation importance, fairness).
    test_records: list[dict[str, Any]]
    test_labels: list[str]
    #: The same test rows with every dataset column (sensitive features need not be inputs).
    test_raw: list[dict[str, Any]]
    #: The label column of the training data.
    label: str
    #: Encoded background rows ``(k, cols)``.
    x_background: np.ndarray
    #: The raw feature (index into ``columns``) that owns each encoded column, -1 if unseen.
    owner: np.ndarray
    #: Per coalition size: where each exact coalition keeps the record's encoded columns.
    keep_cache: dict[int, np.ndarray] = field(default_factory=dict)

    def decode(self, records: Any) -> list[dict[str, Any]]:
        """Check records as the served model does (names the bad row and field)."""
        if not isinstance(records, list) or not records:
            raise InvalidInputError("records: expected a non-empty list of objects")
        return self.handler.decode({"records": records})

    def proba(self, records: list[dict[str, Any]]) -> np.ndarray:
        """Class probabilities ``(rows, classes)`` of decoded records."""
        return self.proba_x(self.handler.encode_inputs(records)["x"])

    def proba_x(self, x: np.ndarray) -> np.ndarray:
        """Class probabilities of encoded inputs ``x``."""
        return softmax(self.handler.forward({"x": np.ascontiguousarray(x, dtype=np.float32)}))


def _decodable(
    model_handler: ClassifierHandler, records: list[dict[str, Any]], labels: list[str]
) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    """Test rows that decode as requests (training may have imputed NULLs serving refuses)."""
    wanted = model_handler.input_columns
    narrowed = [{c: rec.get(c) for c in wanted} for rec in records]
    try:  # usually every row decodes: one call
        return model_handler.decode({"records": narrowed}), list(labels), list(records)
    except InvalidInputError:
        pass  # find the rows that do not, one by one
    kept: list[dict[str, Any]] = []
    kept_labels: list[str] = []
    raw: list[dict[str, Any]] = []
    for rec, label in zip(records, labels, strict=True):
        try:
            (one,) = model_handler.decode({"records": [{c: rec.get(c) for c in wanted}]})
        except InvalidInputError:
            continue
        kept.append(one)
        kept_labels.append(label)
        raw.append(rec)
    return kept, kept_labels, raw


def _encode(handler: ClassifierHandler, records: list[dict[str, Any]]) -> np.ndarray:
    x: np.ndarray = handler.encode_inputs(records)["x"]
    return x.reshape(len(records), -1)


def _ownership(
    handler: ClassifierHandler,
    records: list[dict[str, Any]],
    columns: list[str],
    rng: np.random.Generator,
    probes: int = 256,
) -> np.ndarray:
    """Which raw feature each encoded column follows, learned once by swapping values.

    For every feature, test rows get that feature's value from other test rows; the encoded
    columns that change belong to it. Columns no swap moved (e.g. a category the test split
    lacks) stay -1, and are probed per record when they matter.
    """
    n = min(probes, len(records))
    base = records[:n]
    rows = list(base)
    for c in columns:
        rows.extend({**r, c: records[j][c]} for r, j in zip(base, rng.permutation(n), strict=True))
    x = _encode(handler, rows)
    owner = np.full(x.shape[1], -1)
    for i in range(len(columns)):
        changed = (x[n * (i + 1) : n * (i + 2)] != x[:n]).any(axis=0)
        owner[changed & (owner < 0)] = i
    return owner


def _json_value(value: Any) -> Any:
    """A value as a request body carries it (dates as ISO text, decimals as numbers)."""
    if isinstance(value, datetime | date | dtime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    return value


def dataset_rows(
    model: TabularModel, ref: str
) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    """Rows of dataset version ``ref`` as the model takes them: decoded, labels, raw rows.

    Rows whose label is NULL, or that do not decode as requests, are left out.

    Raises:
        NotFoundError: no such dataset version.
        InvalidInputError: it has no column named as the model's label.
    """
    from aifab.data import lake
    from aifab.data.catalog import resolve

    v = resolve(ref)
    if model.label not in v.columns:
        raise InvalidInputError(f"dataset {v.ref}: no label column {model.label!r}")
    con = lake.connect()
    try:
        rows = con.sql(f"SELECT * FROM {v.scan_sql()}").to_arrow_table().to_pylist()
    finally:
        con.close()
    raw = [{k: _json_value(x) for k, x in r.items()} for r in rows if r[model.label] is not None]
    return _decodable(model.handler, raw, [str(r[model.label]) for r in raw])


def load_tabular(ref: str) -> TabularModel:
    """Load model version ``ref`` for explanations (cached per resolved version).

    Raises:
        InvalidInputError: not a tabular classifier, or its test split cannot be read.
        NotFoundError: no such model version, or its training data was deleted.
    """
    mv = resolve_model(ref)
    key = f"{mv['name']}@{mv['version']}"
    # Keyed by workspace too: the same name@version in another workspace is another model.
    slot = f"{get_settings().resolved_home}|{key}"
    with _lock:
        if slot in _cache:
            _cache.move_to_end(slot)
            return _cache[slot]
    model_dir = download_model(key)
    sidecar = read_sidecar(model_dir)
    pre = (sidecar.get("meta") or {}).get("preprocess") or {}
    if pre.get("modality") != "tabular" or pre.get("image_column") or "image_shape" in pre:
        raise InvalidInputError(
            f"model {key}: explanations support tabular classifiers; this is "
            f"{pre.get('modality') or sidecar.get('builder')!r}"
        )
    handler = ClassifierHandler()
    # One intra-op thread: an explanation's few thousand coalition rows run in ~2 ms on one
    # core, while a parallel region waits on whichever core a busy machine lends last
    # (p50 3.5 ms but p95 56 ms with 2 threads on 2 loaded cores; bench/explain.py).
    options = {"backend": "torch", "max_request_items": 1_000_000, "threads": 1}
    handler.setup(model_dir, sidecar, options)
    try:
        records, labels = test_split(model_dir, sidecar)
    except NotFoundError as exc:
        raise NotFoundError(f"model {key}: {exc.message}") from None
    records, labels, raw = _decodable(handler, records, labels)
    if not records:
        raise InvalidInputError(f"model {key}: its test split has no rows to draw a background")
    rng = np.random.default_rng(0)
    pick = rng.choice(len(records), size=min(BACKGROUND_ROWS, len(records)), replace=False)
    background = [records[i] for i in sorted(pick)]
    columns = list(handler.input_columns)
    model = TabularModel(
        ref=key,
        handler=handler,
        columns=columns,
        classes=list(handler.classes),
        background=background,
        test_records=records,
        test_labels=labels,
        test_raw=raw,
        label=str(pre.get("label") or "label"),
        x_background=_encode(handler, background),
        owner=_ownership(handler, records, columns, rng),
    )
    with _lock:
        _cache[slot] = model
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return model
