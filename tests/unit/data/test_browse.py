from __future__ import annotations

import json
from pathlib import Path

import pytest

from aifab.core.errors import InvalidInputError
from aifab.data import diff, export, head, lineage, query, resolve
from aifab.data.catalog import commit_query


@pytest.fixture
def chain():
    a = commit_query(
        "t",
        "SELECT range AS x, range % 2 AS y FROM range(20)",
        source="gen",
        transform={"kind": "test"},
    ).version
    b = commit_query(
        "t",
        f"SELECT * FROM {a.scan_sql()} WHERE x < 15",
        source="filter",
        transform={"kind": "filter"},
        parents=[a],
    ).version
    c = commit_query(
        "u",
        f"SELECT x * 10 AS x10, y FROM {b.scan_sql()}",
        source="map",
        transform={"kind": "map"},
        parents=[b],
    ).version
    return a, b, c


def test_head_and_query_address_versions(chain) -> None:
    assert head("t", 3).column("x").to_pylist() == [0, 1, 2]
    assert query("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 15}]
    assert query('SELECT count(*) AS n FROM "t@1"').to_pylist() == [{"n": 20}]
    assert query("SELECT max(x10) AS m FROM u JOIN t ON u.x10 = t.x * 10").to_pylist() == [
        {"m": 140}
    ]
    with pytest.raises(InvalidInputError, match="SQL error: .*"):
        query("SELECT nope FROM t")


def test_diff_reports_rows_and_schema(chain) -> None:
    d = diff("t@1", "t@2")
    assert d["rows"] == {"a": 20, "b": 15, "delta": -5}
    assert d["rows_only_in_a"] == 5 and d["rows_only_in_b"] == 0
    assert d["columns_added"] == [] and not d["same_content"]
    assert d["profile_changes"]["x"]["max"] == [19, 14]
    d2 = diff("t@2", "u@1")
    assert d2["columns_added"] == ["x10"] and d2["columns_removed"] == ["x"]


def test_export_formats(chain, tmp_path: Path) -> None:
    csv = export("t@2", tmp_path / "t.csv")
    assert csv.read_text().splitlines()[:2] == ["x,y", "0,0"]
    jl = export("t@2", tmp_path / "t.jsonl")
    assert json.loads(jl.read_text().splitlines()[1]) == {"x": 1, "y": 1}
    with pytest.raises(InvalidInputError, match="cannot export to 'xlsx'"):
        export("t", tmp_path / "t.xlsx")


def test_export_json_is_an_array_and_tsv_arrow_feather_read_back(chain, tmp_path: Path) -> None:
    import pyarrow.csv as pcsv
    import pyarrow.feather as feather

    want = query('SELECT * FROM "t@2"').to_pylist()
    assert json.loads(export("t@2", tmp_path / "t.json").read_text()) == want
    tsv = export("t@2", tmp_path / "t.tsv")
    assert tsv.read_text().splitlines()[:2] == ["x\ty", "0\t0"]
    table = pcsv.read_csv(tsv, parse_options=pcsv.ParseOptions(delimiter="\t"))
    assert table.to_pylist() == want
    for suffix in ("arrow", "feather"):
        assert feather.read_table(export("t@2", tmp_path / f"t.{suffix}")).to_pylist() == want


def test_lineage_walks_both_ways(chain) -> None:
    g = lineage("t@2")
    assert [n["ref"] for n in g["nodes"]] == ["t@1", "t@2", "u@1"]
    assert g["edges"] == [{"parent": "t@1", "child": "t@2"}, {"parent": "t@2", "child": "u@1"}]
    assert [n["content_hash"] for n in g["nodes"]] == [
        resolve(r).content_hash for r in ("t@1", "t@2", "u@1")
    ]


def test_cli_browse_commands(chain, cli, tmp_path: Path) -> None:
    r = cli("data", "list", "--json")
    assert r.exit_code == 0
    assert {d["name"]: d["latest"] for d in json.loads(r.stdout)} == {"t": "t@2", "u": "u@1"}
    r = cli("data", "show", "t@1", "--json", "--profile")
    assert json.loads(r.stdout)["profile"]["num_rows"] == 20
    r = cli("data", "show", "t")
    assert r.exit_code == 0 and "t@2" in r.stdout
    r = cli("data", "versions", "t", "--json")
    assert [v["ref"] for v in json.loads(r.stdout)] == ["t@1", "t@2"]
    r = cli("data", "head", "u", "-n", "2", "--json")
    assert json.loads(r.stdout) == [{"x10": 0, "y": 0}, {"x10": 10, "y": 1}]
    r = cli("data", "query", "SELECT sum(y) AS s FROM t", "--json")
    assert json.loads(r.stdout) == [{"s": 7}]
    r = cli("data", "query", "SELEC 1")
    assert (
        r.exit_code == 2 and r.stderr.startswith("error: SQL error") and "Traceback" not in r.stderr
    )
    r = cli("data", "lineage", "u", "--json")
    assert len(json.loads(r.stdout)["edges"]) == 2
    r = cli("data", "diff", "t@1", "t@2", "--json")
    assert json.loads(r.stdout)["rows"]["delta"] == -5
    r = cli("data", "export", "t", tmp_path / "o.parquet")
    assert r.exit_code == 0 and (tmp_path / "o.parquet").exists()
    r = cli("data", "show", "t@x!")
    assert r.exit_code == 2 and "invalid version" in r.stderr


def test_query_cannot_read_files_outside_the_workspace(chain, tmp_path: Path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    with pytest.raises(InvalidInputError, match="SQL error"):
        query(f"SELECT * FROM read_csv('{secret}')")
