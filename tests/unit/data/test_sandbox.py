"""User SQL and expressions run read-only: no writes into the lake, no files outside it, and no
second statement smuggled in through an expression (hostile specs, as an attacker writes them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aifab.core.errors import InvalidInputError
from aifab.data import lake, query
from aifab.data.catalog import VersionInfo, commit_query, list_versions
from aifab.data.clean import clean
from aifab.data.label import label
from aifab.data.validate import validate


def _data() -> VersionInfo:
    return commit_query(
        "d",
        "SELECT range AS id, 'text ' || range AS text, range * 10 AS amount FROM range(5)",
        source="test",
        transform={"kind": "test"},
    ).version


def _object_bytes(v: VersionInfo) -> bytes:
    return lake.object_path(v.objects[0]).read_bytes()


@pytest.mark.parametrize(
    "sql",
    [
        "COPY (SELECT 42 AS id) TO '{obj}' (FORMAT parquet)",
        "SELECT 1; COPY (SELECT 42 AS id) TO '{obj}' (FORMAT parquet)",
        "EXPORT DATABASE '{dir}/x'",
        "ATTACH '{dir}/x.db' AS x",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "PRAGMA database_list",
        "CREATE TABLE evil AS SELECT 1",
        "CALL pragma_version()",
    ],
)
def test_query_runs_only_one_select(sql: str, tmp_path: Path) -> None:
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    v = _data()
    before = _object_bytes(v)
    obj = lake.object_path(v.objects[0])
    with pytest.raises(InvalidInputError, match="single SELECT"):
        query(sql.format(obj=obj, dir=tmp_path))
    assert _object_bytes(v) == before
    assert list(tmp_path.iterdir()) == []


def test_query_cannot_read_files_outside_the_lake() -> None:
    _data()
    with pytest.raises(InvalidInputError, match="SQL error"):
        query("SELECT * FROM read_csv('/etc/passwd')")
    assert query("WITH x AS (SELECT * FROM d) SELECT count(*) AS n FROM x").to_pylist() == [
        {"n": 5}
    ]


def test_cli_query_copy_into_the_lake_is_refused(cli) -> None:
    v = _data()
    before = _object_bytes(v)
    obj = lake.object_path(v.objects[0])
    r = cli("data", "query", f"COPY (SELECT 42 AS id) TO '{obj}' (FORMAT parquet)")
    assert r.exit_code == 2 and "single SELECT" in r.stderr
    assert _object_bytes(v) == before


def _spec_sql(sql: str) -> dict:
    return {"functions": [{"name": "evil", "sql": sql, "label": "x"}]}


def test_labeling_function_cannot_read_system_files() -> None:
    _data()
    with pytest.raises(InvalidInputError, match="functions.0 \\(evil\\)"):
        label("d", _spec_sql("(SELECT count(*) FROM read_csv('/etc/passwd')) > 0"))
    assert [v.version for v in list_versions("d")] == [1]


def test_labeling_function_cannot_inject_a_statement(tmp_path: Path) -> None:
    _data()
    out = tmp_path / "pwned.csv"
    injected = f"true) AS BOOLEAN); COPY (SELECT 1) TO '{out}'; SELECT CAST((true"
    with pytest.raises(InvalidInputError, match="one SQL expression"):
        label("d", _spec_sql(injected))
    assert not out.exists()
    with pytest.raises(InvalidInputError, match="one SQL expression"):
        label("d", _spec_sql("1); DROP TABLE x; SELECT (1"))


def test_clean_filter_cannot_inject_or_read_files(tmp_path: Path) -> None:
    _data()
    out = tmp_path / "pwned.csv"
    hostile = [
        f"true\n); COPY (SELECT 1) TO '{out}'; SELECT * FROM (SELECT 1) WHERE (true",
        "id > 1) UNION ALL SELECT * FROM d WHERE (true",
    ]
    for where in hostile:
        with pytest.raises(InvalidInputError, match="one SQL expression"):
            clean("d", {"steps": [{"filter": {"where": where}}]})
    with pytest.raises(InvalidInputError, match="SQL error"):
        clean(
            "d", {"steps": [{"filter": {"where": "id IN (SELECT 1 FROM read_csv('/etc/passwd'))"}}]}
        )
    assert not out.exists()
    assert clean("d", {"steps": [{"filter": {"where": "id > 1"}}]}).version.num_rows == 3


def test_validate_expressions_are_one_select(tmp_path: Path) -> None:
    _data()
    out = tmp_path / "pwned.csv"
    with pytest.raises(InvalidInputError, match="one SQL expression"):
        validate("d", {"expectations": [{"sql": {"where": "1) ; DROP TABLE data; SELECT (1"}}]})
    with pytest.raises(InvalidInputError, match="single SELECT"):
        validate("d", {"expectations": [{"sql": {"assert": f"COPY data TO '{out}'"}}]})
    with pytest.raises(InvalidInputError, match="SQL error"):
        validate(
            "d",
            {
                "expectations": [
                    {"sql": {"assert": "SELECT count(*) > 0 FROM read_csv('/etc/passwd')"}}
                ]
            },
        )
    assert not out.exists()
