"""Issue 23 item 6: dataset versions published as a Delta Lake table, read back by other engines.

Each aifab version is one Delta version, over copies of the lake's Parquet objects;
``deltalake`` and DuckDB read every version back as aifab exports it. Issue 31 item 4: the
copies are the table's own (writing to one leaves the lake intact) and a table inside the
workspace is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aifab.core.errors import InvalidInputError
from aifab.data import append_records, export, ingest, lake, list_versions, publish_delta
from aifab.data.delta import delta_versions

deltalake = pytest.importorskip("deltalake", reason="the delta extra: pip install 'aifab[delta]'")


def _rows(table: Any) -> list[str]:
    """Rows as sorted JSON (order-free; absent columns read as null)."""
    cols = sorted(table.column_names)
    return sorted(json.dumps({c: r.get(c) for c in cols}, default=str) for r in table.to_pylist())


def _aifab_rows(ref: str, tmp: Path) -> list[str]:
    import pyarrow.parquet as pq

    out = export(ref, tmp / f"{ref.replace('@', '_')}.parquet")
    return _rows(pq.read_table(out))


def _dataset(tmp: Path) -> list[str]:
    """Three versions: an ingest, an append (sharing the first object), one with a new column."""
    (tmp / "a.csv").write_text("id,city,temp\n1,Oslo,3.5\n2,Rome,18.0\n")
    ingest("weather", tmp / "a.csv")
    append_records("weather", [{"id": 3, "city": "Lima", "temp": 21.0}], flush=True)
    (tmp / "b.csv").write_text("id,city,temp,wind\n9,Nuuk,-8.0,12\n")
    ingest("weather", tmp / "b.csv")
    return [v.ref for v in list_versions("weather")]


def test_history_is_one_delta_version_per_aifab_version(tmp_path: Path, cli: Any) -> None:
    import duckdb
    import polars as pl

    refs = _dataset(tmp_path)
    assert len(refs) == 3
    table = tmp_path / "delta" / "weather"
    r = cli("data", "publish", "weather", table, "--format", "delta", "--history", "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert [p["ref"] for p in out["published"]] == refs
    assert [p["delta_version"] for p in out["published"]] == [0, 1, 2]
    con = duckdb.connect()
    for delta_version, ref in enumerate(refs):
        want = _aifab_rows(ref, tmp_path)
        dt = deltalake.DeltaTable(str(table), version=delta_version)
        assert _rows(dt.to_pyarrow_dataset().to_table()) == want, ref
        assert _rows(pl.read_delta(str(table), version=delta_version).to_arrow()) == want, ref
        files = dt.file_uris()
        scan = con.sql(
            "SELECT * FROM read_parquet(["
            + ", ".join(lake.sql_string(f) for f in files)
            + "], union_by_name = true)"
        ).to_arrow_table()
        assert _rows(scan) == want, ref
    # the table's files are its own copies, never the lake's objects (hard links)
    newest = list_versions("weather")[-1]
    inodes = {lake.object_path(k).stat().st_ino for k in newest.objects}
    table_files = deltalake.DeltaTable(str(table)).file_uris()
    assert not {Path(f).stat().st_ino for f in table_files} & inodes


def test_writing_to_a_published_file_leaves_the_lake_intact(tmp_path: Path, cli: Any) -> None:
    """Issue 31 item 4: published files were hard links, so a write corrupted the lake."""
    _dataset(tmp_path)
    table = tmp_path / "published"
    assert cli("data", "publish", "weather", table, "--format", "delta").exit_code == 0
    for f in deltalake.DeltaTable(str(table)).file_uris():
        with open(f, "r+b") as fh:  # what a careless consumer (or a rewrite in place) does
            fh.write(b"overwritten by a reader of the table")
    r = cli("data", "verify")
    assert r.exit_code == 0, r.stderr
    assert "lake intact" in r.stdout


@pytest.mark.parametrize("inside", [".", "lake", "lake/objects", "exports/weather"])
def test_a_table_inside_the_workspace_is_refused(
    tmp_path: Path, workspace: Path, cli: Any, inside: str
) -> None:
    _dataset(tmp_path)
    target = workspace / inside
    before = sorted(p.relative_to(workspace) for p in workspace.rglob("*"))
    r = cli("data", "publish", "weather", target, "--format", "delta")
    assert r.exit_code != 0
    assert len(r.stderr.strip().splitlines()) == 1
    assert "inside the workspace" in r.stderr
    assert sorted(p.relative_to(workspace) for p in workspace.rglob("*")) == before
    assert cli("data", "verify").exit_code == 0


def test_duckdb_delta_scan_reads_each_version(tmp_path: Path) -> None:
    import duckdb

    refs = _dataset(tmp_path)
    publish_delta("weather", str(tmp_path / "t"), history=True)
    con = duckdb.connect()
    try:
        con.sql("LOAD delta")
    except duckdb.Error as exc:
        pytest.skip(f"DuckDB's delta extension is not installed here (offline): {exc}")
    for delta_version, ref in enumerate(refs):
        scan = con.sql(
            f"SELECT * FROM delta_scan('{tmp_path / 't'}', version => {delta_version})"
        ).to_arrow_table()
        assert _rows(scan) == _aifab_rows(ref, tmp_path)


def test_one_version_at_a_time_follows_aifab_order(tmp_path: Path, cli: Any) -> None:
    refs = _dataset(tmp_path)
    uri = f"file://{tmp_path / 'one'}"
    first = publish_delta(refs[0], uri)
    assert first["published"] == [{"ref": refs[0], "delta_version": 0}]
    assert publish_delta(refs[0], uri)["published"] == []  # already there
    latest = publish_delta("weather", uri)  # NAME: its latest version, skipping the middle
    assert latest["published"] == [{"ref": refs[2], "delta_version": 1}]
    with pytest.raises(InvalidInputError, match="older"):
        publish_delta(refs[1], uri)
    r = cli("data", "publish", refs[1], uri)
    assert r.exit_code != 0 and "older" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    (tmp_path / "c.csv").write_text("x\n1\n")
    ingest("other", tmp_path / "c.csv")
    with pytest.raises(InvalidInputError, match="holds dataset 'weather'"):
        publish_delta("other", uri)
    bad = cli("data", "publish", "weather", str(tmp_path / "x"), "--format", "iceberg")
    assert bad.exit_code != 0 and "delta" in bad.stderr
    assert [v for _, _, v in delta_versions(uri)] == [1, 3]
