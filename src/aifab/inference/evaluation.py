"""A classifier's test split as raw serving records: the rows training held out, found again.

The model sidecar names the dataset version and how its rows were split; the same
``split_indices`` call as training's picks the same test rows, so exports and served models are
scored on exactly the data the training metrics came from.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data import lake
from aifab.data.catalog import resolve
from aifab.models.inputs import split_indices

__all__ = ["test_split"]

#: Columns training never feeds the model (labeling metadata), dropped from serving records.
_LABEL_META = ("label_confidence", "label_source")


def test_split(
    model_dir: Path | str, sidecar: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The raw records of the model's test split and their labels (as class-name strings).

    Records hold the dataset's columns without the label, the split column and labeling
    metadata, with JSON values (dates as ISO text): what a client sends to the served model
    (which may take fewer of the columns). Images (files named in the image column, or
    bytes in it) are base64-encoded, as serving receives them.

    Args:
        model_dir: The model directory (for messages).
        sidecar: Its ``aifab-model.json`` content.

    Raises:
        InvalidInputError: the sidecar lacks the dataset or split description (a model
            trained before they were recorded), or an image file cannot be read.
        NotFoundError: the training dataset version no longer exists.
    """
    meta = sidecar.get("meta") or {}
    pre = meta.get("preprocess") or {}
    datasets = meta.get("datasets") or []
    split = pre.get("split")
    if not datasets or not datasets[0].get("ref") or not isinstance(split, dict):
        raise InvalidInputError(
            f"{model_dir}: the sidecar does not record the training dataset and split "
            "(meta.datasets, meta.preprocess.split); cannot find the test rows"
        )
    label = str(pre.get("label") or "label")
    column = split.get("column")
    try:
        v = resolve(str(datasets[0]["ref"]))
    except NotFoundError as exc:
        raise NotFoundError(f"training data of {model_dir}: {exc.message}") from None
    select = ", ".join(lake.sql_ident(c) for c in v.columns)
    con = lake.connect()
    try:
        # The same query as training's read_table: DuckDB keeps the files' row order.
        table = con.sql(f"SELECT {select} FROM {v.scan_sql()}").to_arrow_table()
    finally:
        con.close()
    if label not in table.column_names:
        raise InvalidInputError(f"dataset {v.ref}: label column {label!r} not found")
    fr = [float(f) for f in split.get("fractions") or (0.8, 0.1, 0.1)]
    index = split_indices(
        table.column(column).to_pylist() if column else None,
        table.num_rows,
        seed=int(split.get("seed", 0)),
        fractions=(fr[0], fr[1], fr[2]),
    )
    rows = table.take(index["test"])
    labels = [str(x) for x in rows.column(label).to_pylist()]
    drop = {label, *_LABEL_META, *([column] if column else [])}
    keep = [c for c in rows.column_names if c not in drop]
    records = [{k: _json_ready(v) for k, v in r.items()} for r in rows.select(keep).to_pylist()]
    image_column = pre.get("image_column")
    if image_column:
        for rec in records:
            rec[image_column] = _image_b64(rec.get(image_column))
    return records, labels


def _json_ready(value: Any) -> Any:
    """A value as a JSON request body carries it: dates as ISO text, decimals as numbers."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _image_b64(path: Any) -> str:
    if isinstance(path, bytes | bytearray):  # image bytes kept in the lake
        return base64.b64encode(path).decode("ascii")
    try:
        return base64.b64encode(Path(str(path)).read_bytes()).decode("ascii")
    except OSError as exc:
        raise InvalidInputError(f"image {path}: cannot read ({exc.strerror})") from None
