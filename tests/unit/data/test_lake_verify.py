"""Lake objects are checked against their content hash: when reused and by ``aifab data verify``."""

from __future__ import annotations

import json

import duckdb

from aifab.core import audit_events
from aifab.data import lake
from aifab.data.catalog import VersionInfo, commit_query

GOOD = "SELECT range AS id, 'row ' || range AS text FROM range(50)"


def _commit(name: str, sql: str = GOOD) -> VersionInfo:
    return commit_query(name, sql, source="test", transform={"kind": "test"}).version


def _overwrite(v: VersionInfo) -> None:
    """What the old query sandbox allowed: COPY other rows over an immutable object."""
    path = lake.object_path(v.objects[0])
    duckdb.execute(
        f"COPY (SELECT 42 AS id, 'evil' AS text) TO {lake.sql_string(str(path))} (FORMAT parquet)"
    )


def _ids(v: VersionInfo) -> list[int]:
    return [r[0] for r in duckdb.sql(f"SELECT id FROM {v.scan_sql()}").fetchall()]


def test_reusing_a_corrupted_object_repairs_it() -> None:
    v = _commit("a")
    _overwrite(v)
    assert _ids(v) == [42]
    w = _commit("b")  # identical content: the lake object is shared
    assert w.objects == v.objects
    assert _ids(w) == list(range(50)) and _ids(v) == list(range(50))
    repairs = audit_events(action="lake.object.repair")
    assert [e["object"] for e in repairs] == [f"object:{v.objects[0]}"]


def test_recommitting_the_same_content_repairs_the_object() -> None:
    v = _commit("a")
    _overwrite(v)
    again = _commit("a")
    assert again.ref == "a@1"
    assert _ids(v) == list(range(50))


def test_cli_verify_reports_corrupt_and_missing_objects(cli) -> None:
    v = _commit("a")
    w = _commit("b", "SELECT range AS id FROM range(7)")
    _commit("c", "SELECT range AS id FROM range(3)")
    r = cli("data", "verify")
    assert r.exit_code == 0, r.stderr
    assert "3 objects" in r.stdout
    _overwrite(v)
    lake.object_path(w.objects[0]).unlink()
    r = cli("data", "verify", "--json")
    assert r.exit_code == 3
    out = json.loads(r.stdout)
    problems = {p["object"]: p for p in out["problems"]}
    assert problems[v.objects[0]]["problem"].startswith("corrupt")
    assert problems[v.objects[0]]["versions"] == ["a@1"]
    assert problems[w.objects[0]]["problem"] == "missing"
    assert out["checked"] == 3 and out["ok"] == 1
    r = cli("data", "verify")
    assert r.exit_code == 3 and "2 of 3 lake objects" in r.stderr
    r = cli("data", "verify", "c")
    assert r.exit_code == 0 and "1 objects" in r.stdout
    r = cli("data", "verify", "b")
    assert r.exit_code == 3 and "missing" in r.stderr
    r = cli("data", "verify", "ghost")
    assert r.exit_code == 1 and "not found" in r.stderr
