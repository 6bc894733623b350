"""The listing commands' fast path: plain SQL on the SQLite metadata DB, no ORM imported.

``aifab data list`` through :func:`aifab.data.list_datasets` imports SQLAlchemy, the table
modules, pydantic-settings, pyarrow and DuckDB (the ``aifab.data`` package face) to run one
query: about 0.8 s more than ``aifab --help`` on a quiet machine, several seconds under load.
Here the same query runs on the stdlib ``sqlite3`` module. Each function returns exactly what
its service function returns, or None where the service function must answer (another DB, a
DB to create or migrate); tests compare the two on the same workspace.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aifab.core.sqlite_read import open_metadata_db

# The ORM query of aifab.data.catalog.list_datasets, in SQL.
_LIST_DATASETS = """
SELECT d.name, v.version, v.num_rows, v.schema, v.created_at, latest.n, d.description
FROM datasets AS d
JOIN (
    SELECT dataset_id, max(version) AS v, count(id) AS n
    FROM dataset_versions GROUP BY dataset_id
) AS latest ON latest.dataset_id = d.id
JOIN dataset_versions AS v ON v.dataset_id = d.id AND v.version = latest.v
ORDER BY d.name
"""


def list_datasets() -> list[dict[str, Any]] | None:
    """:func:`aifab.data.list_datasets` (every dataset), or None to call it instead."""
    with open_metadata_db() as conn:
        if conn is None:
            return None
        rows = conn.execute(_LIST_DATASETS).fetchall()
    return [
        {
            "name": name,
            "latest": f"{name}@{version}",
            "versions": int(n),
            "rows": num_rows,
            "columns": len(json.loads(schema)),
            "updated_at": created_at,
            "description": description,
        }
        for name, version, num_rows, schema, created_at, n, description in rows
    ]


# The ORM queries of aifab.data.catalog.resolve (NAME or NAME@N) and its parents, in SQL.
_VERSION = """
SELECT v.id, d.name, v.version, v.content_hash, v.objects, v.schema, v.num_rows, v.num_bytes,
       v.source, v.transform, v.created_at, v.created_by, v.profile
FROM dataset_versions AS v JOIN datasets AS d ON d.id = v.dataset_id
WHERE d.name = ? AND (? IS NULL OR v.version = ?)
ORDER BY v.version DESC LIMIT 1
"""
_PARENTS = """
SELECT d.name, v.version FROM dataset_lineage AS e
JOIN dataset_versions AS v ON v.id = e.parent_id JOIN datasets AS d ON d.id = v.dataset_id
WHERE e.child_id = ? ORDER BY v.id
"""
#: The references answered here: a name, or a name and a version number (``NAME@3``). Others
#: (``@v3``, ``@latest``, content hashes, malformed ones) go to aifab.data.parse_ref.
_SIMPLE_REF = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.\-]*)(?:@([0-9]{1,5}))?")


def resolve(ref: str) -> dict[str, Any] | None:
    """``aifab.data.resolve(ref).to_dict(with_profile=True)``, or None to call it instead.

    None also where the dataset or version does not exist: the service function's error says so.
    """
    match = _SIMPLE_REF.fullmatch(ref)
    if match is None:
        return None
    name, version = match[1], (int(match[2]) if match[2] else None)
    with open_metadata_db() as conn:
        if conn is None:
            return None
        row = conn.execute(_VERSION, (name, version, version)).fetchone()
        if row is None:
            return None
        parents = conn.execute(_PARENTS, (row[0],)).fetchall()
    (vid, dataset, number, content_hash, objects, schema, num_rows, num_bytes, source,
     transform, created_at, created_by, profile) = row  # fmt: skip
    return {
        "id": vid,
        "dataset": dataset,
        "version": number,
        "content_hash": content_hash,
        "objects": list(json.loads(objects)),
        "schema": list(json.loads(schema)),
        "num_rows": num_rows,
        "num_bytes": num_bytes,
        "source": source,
        "transform": dict(json.loads(transform)),
        "created_at": created_at,
        "created_by": created_by,
        "parents": [f"{n}@{v}" for n, v in parents],
        "profile": dict(json.loads(profile)),
        "ref": f"{dataset}@{number}",
    }
