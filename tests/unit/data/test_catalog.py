from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from aifab.core import verify_audit
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data import lake
from aifab.data.catalog import commit_query, list_versions, resolve
from aifab.data.refs import DatasetRef, parse_ref

GEN = "SELECT range AS x, range % 3 AS y, 'k' || (range % 7) AS s FROM range({n})"


def test_parse_ref_forms() -> None:
    assert parse_ref("iris") == DatasetRef("iris")
    assert parse_ref("iris@latest") == DatasetRef("iris")
    assert parse_ref("iris@3") == DatasetRef("iris", version=3)
    assert parse_ref("iris@v12") == DatasetRef("iris", version=12)
    assert parse_ref("iris@abcdef12") == DatasetRef("iris", content_hash="abcdef12")
    for bad in ("", "@3", "iris@v", "iris@zz!", "../etc"):
        with pytest.raises(InvalidInputError):
            parse_ref(bad)


def test_identical_content_returns_existing_version() -> None:
    a = commit_query("t", GEN.format(n=50), source="gen", transform={"kind": "test"})
    b = commit_query("t", GEN.format(n=50), source="again", transform={"kind": "test"})
    assert a.created and not b.created
    assert b.version.ref == "t@1"
    c = commit_query("t", GEN.format(n=51), source="gen", transform={"kind": "test"})
    assert c.created and c.version.ref == "t@2"
    assert [v.version for v in list_versions("t")] == [1, 2]
    assert resolve("t").ref == "t@2"
    assert resolve(f"t@{a.version.content_hash[:10]}").ref == "t@1"


def test_content_hash_ignores_file_layout_but_not_order() -> None:
    con = lake.connect()
    d = Path(lake.staging_path()).parent
    one, two, rev = d / "one.parquet", d / "two.parquet", d / "rev.parquet"
    lake.copy_to_parquet(con, GEN.format(n=300), one)
    con.execute(f"COPY ({GEN.format(n=300)}) TO '{two}' (FORMAT parquet, ROW_GROUP_SIZE 7)")
    lake.copy_to_parquet(con, GEN.format(n=300) + " ORDER BY x DESC", rev)
    assert lake.content_hash(con, [one]) == lake.content_hash(con, [two])
    assert lake.content_hash(con, [one]) != lake.content_hash(con, [rev])


def test_version_records_schema_profile_source_and_lineage() -> None:
    base = commit_query("t", GEN.format(n=100), source="gen", transform={"kind": "test"}).version
    child = commit_query(
        "t2",
        f"SELECT x, s FROM {base.scan_sql()} WHERE y = 0",
        source="derived",
        transform={"kind": "filter"},
        parents=[base],
    ).version
    assert child.parents == ["t@1"]
    assert child.columns == ["x", "s"]
    assert child.num_rows == 34
    col = child.profile["columns"]["x"]
    assert col["kind"] == "numeric" and col["min"] == 0 and col["max"] == 99
    assert sum(col["histogram"]["counts"]) == 34
    assert child.profile["columns"]["s"]["distinct"] == 7
    assert child.transform == {"kind": "filter"}
    assert verify_audit().ok


def test_missing_dataset_and_version_are_named() -> None:
    with pytest.raises(NotFoundError, match="dataset 'nope' not found"):
        resolve("nope")
    commit_query("t", GEN.format(n=5), source="gen", transform={"kind": "test"})
    with pytest.raises(NotFoundError, match="has no version 't@9'"):
        resolve("t@9")


_WRITER = textwrap.dedent(
    """
    import sys
    from aifab.data.catalog import commit_query
    tag, n = sys.argv[1], int(sys.argv[2])
    for i in range(n):
        commit_query("shared", f"SELECT '{tag}' AS w, {i} AS i, range AS r FROM range(200)",
                     source=tag, transform={"kind": "test"})
    """
)


@pytest.mark.integration
def test_two_processes_committing_to_one_dataset(workspace: Path) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, tag, "6"]) for tag in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    versions = list_versions("shared")
    assert [v.version for v in versions] == list(range(1, 13))
    assert len({v.content_hash for v in versions}) == 12
    assert sorted(v.source for v in versions) == ["a"] * 6 + ["b"] * 6
    assert verify_audit().ok
    # A commit whose predicted version number the other process took restamped its object.
    stamps = [pq.read_metadata(lake.object_path(v.objects[0])).metadata for v in versions]
    assert [s[b"aifab.version"].decode() for s in stamps] == [str(v.version) for v in versions]


_SLOW_WRITER = textwrap.dedent(
    """
    from aifab.data.catalog import commit_query
    i = 0
    while True:
        i += 1
        commit_query("big", f"SELECT {i} AS i, range AS r, md5(range::VARCHAR) AS h "
                     "FROM range(300000)", source="loop", transform={"kind": "test"})
    """
)


@pytest.mark.integration
def test_kill_9_mid_commit_leaves_no_partial_version(workspace: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER])
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if list_versions("big"):
                    break
            except NotFoundError:
                pass
            time.sleep(0.2)
        time.sleep(0.7)  # land somewhere inside the next commit
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    versions = list_versions("big")
    assert versions
    con = lake.connect()
    for v in versions:
        files = [lake.object_path(k) for k in v.objects]
        assert all(f.exists() for f in files)
        assert lake.content_hash(con, files) == v.content_hash
        assert v.num_rows == 300000
    assert verify_audit().ok


def test_content_hash_covers_every_column_whatever_its_name() -> None:
    con = lake.connect()
    d = Path(lake.staging_path()).parent
    a, b = d / "a.parquet", d / "b.parquet"
    lake.copy_to_parquet(con, "SELECT 1 AS t, 2 AS x", a)
    lake.copy_to_parquet(con, "SELECT 1 AS t, 3 AS x", b)
    assert lake.content_hash(con, [a]) != lake.content_hash(con, [b])


def test_profile_handles_any_column_names_and_kinds() -> None:
    v = commit_query(
        "odd",
        "SELECT * FROM (VALUES (1, 'x', DATE '2024-01-02', true, NULL::DOUBLE), "
        "(2, 'y', DATE '2024-03-04', false, NULL::DOUBLE)) t(b, n, d, f, empty)",
        source="test",
        transform={"kind": "test"},
    ).version
    cols = v.profile["columns"]
    assert cols["b"]["histogram"]["counts"][0] == 1 and sum(cols["b"]["histogram"]["counts"]) == 2
    assert cols["n"]["top_values"] == [["x", 1], ["y", 1]]
    assert cols["d"]["min"] == "2024-01-02" and cols["d"]["max"] == "2024-03-04"
    assert cols["f"]["kind"] == "boolean"
    assert cols["empty"]["null_share"] == 1.0 and "min" not in cols["empty"]


def test_large_versions_get_their_profile_on_first_use(
    monkeypatch: pytest.MonkeyPatch, cli
) -> None:
    from aifab.data import catalog

    monkeypatch.setattr(catalog, "EAGER_PROFILE_MAX_ROWS", 10)
    v = commit_query("big", GEN.format(n=50), source="gen", transform={"kind": "test"}).version
    assert v.num_rows == 50 and v.profile == {}
    r = cli("data", "show", "big", "--profile", "--json")
    assert r.exit_code == 0
    assert json.loads(r.stdout)["profile"]["columns"]["x"]["max"] == 49
    assert resolve("big").profile["num_rows"] == 50  # stored for next time
