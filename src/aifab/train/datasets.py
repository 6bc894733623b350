"""Dataset versions -> arrays for training, and the seeded batch order that makes resume exact.

Columns, splits, labels, tabular features, images (pixel columns or files), text and triples;
the per-epoch permutation depends only on (seed, epoch). Arrays are NumPy; recipes turn
each batch into tensors on their device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from aifab.core.errors import InvalidInputError
from aifab.data import lake
from aifab.data.catalog import VersionInfo
from aifab.models.inputs import (
    SPLITS,
    Standardizer,
    image_files,
    numeric_matrix,
    split_indices,
    tokenize,
)

__all__ = [
    "SPLITS",
    "Standardizer",
    "dataset_input",
    "encode_labels",
    "epoch_batches",
    "image_files",
    "numeric_matrix",
    "read_table",
    "split_indices",
    "tokenize",
    "triples",
]


def read_table(v: VersionInfo, columns: Sequence[str] | None = None) -> pa.Table:
    """Read ``columns`` (default all) of a dataset version into an Arrow table.

    Raises:
        InvalidInputError: a column is missing (the message lists the dataset's columns).
    """
    cols = list(dict.fromkeys(columns or v.columns))
    missing = [c for c in cols if c not in v.columns]
    if missing:
        raise InvalidInputError(
            f"dataset {v.ref}: column {missing[0]!r} not found (columns: {', '.join(v.columns)})"
        )
    select = ", ".join(lake.sql_ident(c) for c in cols)
    con = lake.connect()
    try:
        return con.sql(f"SELECT {select} FROM {v.scan_sql()}").to_arrow_table()
    finally:
        con.close()


def dataset_input(v: VersionInfo, context: str = "training") -> dict[str, Any]:
    """A version described for the tracking run's dataset inputs (ref and content hash)."""
    return {
        "name": v.dataset,
        "ref": v.ref,
        "digest": v.content_hash,
        "source": v.source,
        "num_rows": v.num_rows,
        "schema": v.schema,
        "context": context,
    }


def encode_labels(values: Sequence[Any], column: str) -> tuple[np.ndarray, list[str]]:
    """Class indices and the class names (sorted as text; index i is ``classes[i]``).

    Raises:
        InvalidInputError: a NULL label, or fewer than two classes.
    """
    missing = [i for i, v in enumerate(values) if v is None]
    if missing:
        raise InvalidInputError(f"label column {column!r}: row {missing[0]} has no label")
    texts = [str(v) for v in values]
    classes = sorted(set(texts))
    if len(classes) < 2:
        raise InvalidInputError(
            f"label column {column!r} has only one class ({classes[0]!r}); need at least two"
        )
    index = {c: i for i, c in enumerate(classes)}
    return np.asarray([index[t] for t in texts], dtype=np.int64), classes


def triples(
    table: pa.Table, head: str, relation: str, tail: str
) -> tuple[np.ndarray, list[str], list[str]]:
    """``(n, 3)`` int64 (head, relation, tail) ids with the entity and relation vocabularies."""
    h = [str(x) for x in table.column(head).to_pylist()]
    r = [str(x) for x in table.column(relation).to_pylist()]
    t = [str(x) for x in table.column(tail).to_pylist()]
    entities = sorted(set(h) | set(t))
    relations = sorted(set(r))
    e_id = {e: i for i, e in enumerate(entities)}
    r_id = {x: i for i, x in enumerate(relations)}
    ids = np.asarray([[e_id[a], r_id[b], e_id[c]] for a, b, c in zip(h, r, t, strict=True)])
    return ids.reshape(-1, 3).astype(np.int64), entities, relations


def epoch_batches(
    n: int, batch_size: int, *, seed: int, epoch: int, drop_last: bool = False
) -> list[np.ndarray]:
    """The global batches of one epoch: a permutation seeded by ``(seed, epoch)``, chunked.

    The order depends on nothing else (no global RNG), so a run resumed at ``(epoch, batch)``
    sees exactly the batches an uninterrupted run would, and every replica sees the same ones.
    """
    order = np.random.default_rng([seed, epoch]).permutation(n)
    stop = n - n % batch_size if drop_last else n
    return [order[i : i + batch_size] for i in range(0, stop, batch_size)]
