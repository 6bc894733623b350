"""Lake objects name the dataset version that wrote them in their Parquet key-value metadata."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow.parquet as pq

from aifab.data import append_records, ingest, lake, split
from aifab.data.catalog import VersionInfo, commit_query

CSV = "# exported 2026-11-30\nid,city,score\n1,Paris,0.5\n2,Köln,nan\n3,Oslo,inf\n4,Rome,1.5\n"


def _kv(path: Path) -> dict[str, str]:
    raw = pq.read_metadata(path).metadata or {}
    return {k.decode(): v.decode() for k, v in raw.items() if k.startswith(b"aifab.")}


def _schema_hash(v: VersionInfo) -> str:
    columns = "".join(f"{c['name']}:{c['type']};" for c in v.schema)
    return hashlib.sha256(columns.encode()).hexdigest()


def _object(v: VersionInfo, i: int = -1) -> Path:
    return lake.object_path(v.objects[i])


def test_an_ingested_object_names_its_dataset_version_and_schema(tmp_path: Path) -> None:
    src = tmp_path / "cities.csv"
    src.write_text(CSV, encoding="utf-8")
    v1 = ingest("cities", src).version
    src.write_text(CSV + "5,Lima,2.5\n", encoding="utf-8")
    v2 = ingest("cities", src).version
    assert _kv(_object(v1)) == {
        "aifab.dataset": "cities",
        "aifab.version": "1",
        "aifab.schema_hash": _schema_hash(v1),
    }
    assert _kv(_object(v2))["aifab.version"] == "2"
    # The stamp does not change what the object's key promises: its rows hash to it.
    con = lake.connect()
    assert lake.object_problem(con, v1.objects[0]) is None
    assert lake.object_problem(con, v2.objects[0]) is None


def test_transform_outputs_are_stamped_too(tmp_path: Path) -> None:
    src = tmp_path / "cities.csv"
    src.write_text(CSV, encoding="utf-8")
    ingest("cities", src)
    out = split("cities", {"method": "random", "seed": 1}, output="cities_split").version
    assert _kv(_object(out))["aifab.dataset"] == "cities_split"
    assert _kv(_object(out))["aifab.version"] == "1"
    assert _kv(_object(out))["aifab.schema_hash"] == _schema_hash(out)


def test_a_shared_object_keeps_the_version_that_first_wrote_it() -> None:
    sql = "SELECT range AS x FROM range(20)"
    first = commit_query("a", sql, source="gen", transform={"kind": "test"}).version
    again = commit_query("b", sql, source="gen", transform={"kind": "test"}).version
    assert again.objects == first.objects  # content-addressed: one file for both
    assert _kv(_object(again))["aifab.dataset"] == "a"


def test_an_append_stamps_only_its_new_object() -> None:
    append_records("events", [{"k": 1}, {"k": 2}], flush=True)
    v = append_records("events", [{"k": 3}], flush=True).version
    assert v is not None and v.version == 2 and len(v.objects) == 2
    assert [_kv(_object(v, i))["aifab.version"] for i in range(2)] == ["1", "2"]


def test_restamping_touches_only_an_object_this_commit_wrote() -> None:
    # The path a commit takes when a concurrent writer took the version number it predicted.
    v = commit_query("t", "SELECT 1 AS x", source="gen", transform={"kind": "test"}).version
    con = lake.connect()
    stamped = lake.object_metadata("t", 1, v.schema)
    other = lake.object_metadata("u", 9, v.schema)
    assert not lake.restamp_object(con, v.objects[0], other, stamped)
    assert _kv(_object(v))["aifab.version"] == "1"
    assert lake.restamp_object(con, v.objects[0], stamped, lake.object_metadata("t", 2, v.schema))
    assert _kv(_object(v))["aifab.version"] == "2"
    assert lake.object_problem(con, v.objects[0]) is None
