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
