"""Pushed records on two machines: two processes, each with its own empty local directory,
sharing a PostgreSQL metadata DB and an object store (moto's standalone S3 server, the named
stand-in for S3/MinIO), append to one dataset at once and seal whenever enough rows are
pending (so they also seal at the same time); then one flushes. Every row lands exactly once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nodes import run_nodes  # noqa: E402

pytestmark = pytest.mark.integration

_NODE = """
import sys, time
from aifab.data import append_records
node, n = sys.argv[1], int(sys.argv[3])
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
for i in range(n):
    append_records("pushed", [{"node": node, "i": i}], batch_rows=4)
"""


def test_two_nodes_append_and_seal_concurrently_and_every_row_lands_once(
    shared_pg: str, s3_storage: str, tmp_path: Path
) -> None:
    from aifab.core.storage import get_store
    from aifab.data import flush_appends, list_versions, query

    n = 15
    run_nodes(_NODE, tmp_path, str(n))
    flush_appends("pushed")  # from a third directory (this test's workspace)
    rows = query("SELECT node, i FROM pushed ORDER BY node, i").to_pylist()
    assert rows == [{"node": node, "i": i} for node in "ab" for i in range(n)]
    versions = list_versions("pushed")
    assert [v.version for v in versions] == list(range(1, len(versions) + 1))
    assert all(v.parents == [f"pushed@{v.version - 1}"] for v in versions[1:])
    assert [k for k in get_store().list("lake/pending") if "/failed/" in k] == []
    assert [k for k in get_store().list("lake/pending") if k.endswith(".parquet")] == []
