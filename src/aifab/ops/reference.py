"""The reference a deployment's model was trained on, found through lineage.

deployment -> model ref -> registered version -> training run -> its training dataset version;
rows of the training split only, read from the lake with DuckDB.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from aifab.core.errors import InvalidInputError, NotFoundError

__all__ = ["Reference", "load_reference"]


class Reference:
    """Reference columns plus where they came from and which column is the label."""

    def __init__(self, table: pa.Table, dataset: str, label: str | None, model: str) -> None:
        self.table = table
        self.dataset = dataset
        self.label = label
        self.model = model

    def columns(self) -> dict[str, pa.ChunkedArray]:
        """Column name -> values."""
        return {name: self.table.column(name) for name in self.table.column_names}


def _training_dataset(model_ref: str) -> tuple[str, str | None, str]:
    """``(dataset ref, label column, model name@version)`` of ``model_ref``'s training run.

    The same walk as ``aifab models lineage`` (registry -> run -> dataset inputs), through
    ``track`` alone: serving reaches this module and must not import training code.
    """
    from aifab.track.registry import resolve_model
    from aifab.track.runs import get_run

    mv = resolve_model(model_ref)
    model = f"{mv['name']}@{mv['version']}"
    if not mv.get("run_id"):
        raise NotFoundError(f"model {model} has no training run: no reference data to compare")
    run = get_run(mv["run_id"])
    datasets = [d for d in run["datasets"] if d.get("ref")]
    training = [d for d in datasets if d.get("context") in (None, "training")] or datasets
    if not training:
        raise NotFoundError(f"model {model}: its training run names no dataset")
    label = run["params"].get("label")
    return str(training[0]["ref"]), label, model


def load_reference(
    model_ref: str,
    *,
    dataset: str | None = None,
    split: str | None = "train",
    max_rows: int = 200_000,
) -> Reference:
    """Load the reference rows for ``model_ref`` (or ``dataset`` when given).

    Raises:
        NotFoundError: the model, its run, or the dataset version is gone (say which).
    """
    from aifab.data import lake
    from aifab.data.catalog import resolve

    label: str | None = None
    model = model_ref
    if dataset is None:
        dataset, label, model = _training_dataset(model_ref)
    try:
        version = resolve(dataset)
    except NotFoundError as exc:
        raise NotFoundError(f"reference {dataset} of {model} is gone: {exc.message}") from None
    where = ""
    if split is not None and "split" in version.columns:
        where = f" WHERE split = {lake.sql_string(split)}"
    sql = f"SELECT * FROM {version.scan_sql()}{where} LIMIT {int(max_rows)}"
    try:
        table = lake.connect().sql(sql).to_arrow_table()
    except Exception as exc:  # noqa: BLE001 - lake files removed under a live catalog entry
        raise NotFoundError(f"reference {dataset} of {model} cannot be read: {exc}") from None
    return Reference(table, version.ref, label, model)


_PREDICTIONS: dict[tuple[str, int], list[str]] = {}


def reference_predictions(ref: Reference, limit: int = 5000) -> list[str]:
    """What the model predicts on (up to ``limit``) reference rows: the prediction baseline.

    Cached per model version and reference for the life of the process.

    Raises:
        InvalidInputError: the model cannot load, or the reference lacks its input columns.
    """
    key = (f"{ref.model}|{ref.dataset}", limit)
    if key in _PREDICTIONS:
        return _PREDICTIONS[key]
    from aifab.inference.loading import load_served_model

    handler = load_served_model(ref.model).handler
    names = [c["name"] for c in handler.describe().get("input_columns", [])]
    missing = [n for n in names if n not in ref.table.column_names]
    if missing:
        raise InvalidInputError(f"reference {ref.dataset} lacks model input {missing[0]!r}")
    rows = ref.table.select(names).slice(0, limit).to_pylist()
    out: list[str] = []
    for i in range(0, len(rows), 500):
        items = handler.decode({"records": rows[i : i + 500]})
        for pred in handler.predict(items):
            label = handler.encode(pred).get("label")
            out.append(str(label))
    _PREDICTIONS[key] = out
    return out


_EMBEDDINGS: dict[tuple[str, ...], list[list[float]]] = {}


def reference_embeddings(ref: Reference, column: str, model: str, limit: int) -> list[list[float]]:
    """Vectors of (a seeded sample of at most ``limit``) texts of ``column`` from ``model``.

    Cached per model version, reference, column, embedding model and limit for the life of
    the process: the reference does not change under a model version.

    Raises:
        InvalidInputError: the embedding model cannot load.
    """
    from aifab.ops.drift.embedding import embed_texts
    from aifab.ops.drift.text import sample, texts

    key = (ref.model, ref.dataset, column, model, str(limit))
    if key not in _EMBEDDINGS:
        items, _ = texts(ref.table.column(column))
        _EMBEDDINGS[key] = embed_texts(sample(items, limit, 0), model)
    return _EMBEDDINGS[key]


def describe(ref: Reference) -> dict[str, Any]:
    """What a report says about its reference."""
    return {"dataset": ref.dataset, "model": ref.model, "rows": ref.table.num_rows}
