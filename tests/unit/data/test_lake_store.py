"""The lake on an object store (moto's S3 server, the stand-in for S3/MinIO): objects are
stored in the bucket, read from any workspace directory, verified against the store, and the
query sandbox still refuses every path outside the lake."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from aifab.core.errors import IntegrityError, InvalidInputError
from aifab.core.storage import get_store
from aifab.data import lake, query
from aifab.data.catalog import VersionInfo, commit_query, resolve
from aifab.data.clean import clean
from aifab.data.verify import verify_lake

ROWS = "SELECT range AS id, 'row ' || range AS text, range % 3 AS g FROM range(100)"


@pytest.fixture(autouse=True)
def _on_s3(s3_storage: str) -> str:
    return s3_storage


def _commit(name: str, sql: str = ROWS) -> VersionInfo:
    return commit_query(name, sql, source="test", transform={"kind": "test"}).version


def test_objects_are_written_to_the_store(workspace: Path) -> None:
    v = _commit("a")
    store = get_store()
    assert store.list("lake/objects") == [f"lake/{k}" for k in v.objects]
    assert store.size(f"lake/{v.objects[0]}") == v.num_bytes


def test_another_workspace_reads_and_derives_versions(other_node: Callable[[], Path]) -> None:
    v = _commit("a")
    home = other_node()
    assert not (home / "lake" / v.objects[0]).exists()
    assert query("SELECT count(*) AS n, sum(id) AS s FROM a").to_pylist() == [{"n": 100, "s": 4950}]
    out = clean("a", {"steps": [{"filter": {"where": "g = 0"}}]}, output="a0").version
    assert out.num_rows == 34
    assert set(get_store().list("lake/objects")) == {f"lake/{k}" for k in v.objects + out.objects}
    assert resolve("a0").content_hash == out.content_hash


def test_verify_checks_the_stored_object_not_the_cache(workspace: Path, tmp_path: Path) -> None:
    v = _commit("a")
    w = _commit("b", "SELECT 1 AS id")
    assert verify_lake().ok == 2
    store = get_store()
    evil = tmp_path / "evil.parquet"
    duckdb.execute(f"COPY (SELECT 42 AS id) TO '{evil}' (FORMAT parquet)")
    store.put_file(evil, f"lake/{v.objects[0]}")
    store.delete(f"lake/{w.objects[0]}")
    report = verify_lake()
    problems = {p.object: p.problem for p in report.problems}
    assert problems[w.objects[0]] == "missing"
    assert problems[v.objects[0]].startswith("corrupt")
    # committing the same rows again repairs the stored object
    _commit("a")
    assert verify_lake("a").ok == 1


def test_the_sandbox_still_refuses_paths_outside_the_lake(tmp_path: Path) -> None:
    _commit("a")
    secret = tmp_path / "secret.csv"
    secret.write_text("x\n1\n")
    for sql in (f"SELECT * FROM read_csv('{secret}')", "SELECT * FROM read_csv('/etc/passwd')"):
        with pytest.raises(InvalidInputError, match="SQL error"):
            query(sql)
    with pytest.raises(InvalidInputError):
        query(f"SELECT * FROM read_parquet('{get_store().url('lake/objects/x.parquet')}')")


def test_a_missing_stored_object_fails_the_read_clearly(workspace: Path, cli) -> None:
    v = _commit("a")
    (workspace / "lake" / v.objects[0]).unlink()
    get_store().delete(f"lake/{v.objects[0]}")
    with pytest.raises(IntegrityError, match="missing from s3://"):
        lake.object_path(v.objects[0])
    r = cli("data", "query", "SELECT count(*) FROM a")
    assert r.exit_code == 3 and "missing from s3://" in r.stderr
    assert "Traceback" not in r.stderr
