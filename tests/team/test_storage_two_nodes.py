"""Two machines sharing one workspace: two processes, each with its own empty local directory,
sharing a PostgreSQL metadata DB and an object store (moto's standalone S3 server, the named
stand-in for S3/MinIO), commit versions of one dataset at once and lose none."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nodes import run_nodes  # noqa: E402

_NODE = """
import sys, time
from aifab.data.catalog import commit_query
node, n = sys.argv[1], int(sys.argv[3])
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
for i in range(n):
    sql = f"SELECT range AS id, '{node}' AS node, {i} AS i FROM range({10 + i})"
    commit_query("shared", sql, source=node, transform={"kind": "test"})
"""


def test_two_nodes_commit_concurrently_without_losing_a_version(
    shared_pg: str, s3_storage: str, tmp_path: Path
) -> None:
    from aifab.core.storage import get_store
    from aifab.data.catalog import list_versions
    from aifab.data.verify import verify_lake

    n = 6
    run_nodes(_NODE, tmp_path, str(n))
    versions = list_versions("shared")
    assert sorted(v.version for v in versions) == list(range(1, 2 * n + 1))
    assert sorted((v.source, v.num_rows) for v in versions) == sorted(
        (node, 10 + i) for node in "ab" for i in range(n)
    )
    stored = set(get_store().list("lake/objects"))
    assert stored == {f"lake/{k}" for v in versions for k in v.objects}
    report = verify_lake("shared")  # from a third directory (this test's workspace)
    assert report.ok == 2 * n and not report.problems
