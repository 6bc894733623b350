from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data import lake
from aifab.data.catalog import VersionInfo, commit_query, resolve
from aifab.data.clean import CleanSpec, clean
from aifab.data.clean_steps import Filter
from aifab.data.quarantine import list_quarantine

PEOPLE = """SELECT * FROM (VALUES
  (1, '  Ann   Lee ', '10', 5.0),
  (2, 'Bob', 'abc', NULL),
  (1, '  Ann   Lee ', '10', 5.0),
  (3, NULL, NULL, 100.0),
  (4, 'Dan', '7', 1.0),
  (5, 'Eve', ' x1', 2.0)
) t(id, name, age, income)"""


def rows(v: VersionInfo, order: str = "") -> list[tuple[Any, ...]]:
    con = lake.connect()
    return con.execute(f"SELECT * FROM {v.scan_sql()} {order}").fetchall()


def make(sql: str = PEOPLE, name: str = "ds") -> VersionInfo:
    return commit_query(name, sql, source="test", transform={"kind": "test"}).version


def test_steps_give_exact_rows_and_lineage() -> None:
    src = make()
    spec = {
        "steps": [
            {"drop_duplicates": {"subset": ["id"]}},
            {"cast": {"columns": {"age": "INTEGER", "income": "DOUBLE"}}},
            {"fill_nulls": {"values": {"name": "?"}, "strategy": {"income": "median"}}},
            {"normalize_text": {"columns": ["name"], "lower": True}},
            {"rename": {"columns": {"name": "who"}}},
            {"filter": {"where": "id <> 4"}},
        ]
    }
    result = clean("ds", spec)
    v = result.version
    assert result.created and v.ref == "ds@2" and v.parents == ["ds@1"]
    # Bob ('abc') and Eve (' x1') fail the cast; the median of 5, 100, 1 is 5.
    assert rows(v) == [(1, "ann lee", 10, 5.0), (3, "?", None, 100.0)]
    assert v.columns == ["id", "who", "age", "income"]
    assert v.transform["kind"] == "clean"
    assert v.transform["spec"]["steps"][0] == {"drop_duplicates": {"subset": ["id"]}}
    steps = v.transform["steps"]
    assert [s["op"] for s in steps] == [
        "drop_duplicates",
        "cast",
        "fill_nulls",
        "normalize_text",
        "rename",
        "filter",
    ]
    assert steps[1]["quarantined"] == 2
    assert steps[2]["filled_with"] == {"name": "?", "income": 5.0}
    assert src.ref == "ds@1" and resolve("ds").ref == "ds@2"


def test_cast_failures_are_quarantined_with_rule_and_record() -> None:
    src = make()
    clean("ds", {"steps": [{"cast": {"columns": {"age": "INTEGER"}}}]})
    got = sorted(list_quarantine("ds", stage="clean"), key=lambda r: r["line"])
    assert [(r["rule"], r["line"]) for r in got] == [("cast:age", 2), ("cast:age", 6)]
    assert got[0]["record"] == {"id": 2, "name": "Bob", "age": "abc", "income": None}
    assert "'abc'" in got[0]["reason"] and "INTEGER" in got[0]["reason"]
    assert got[0]["version_id"] == src.id
    # Nulls are not cast failures: the row with a null age stays.
    assert [r[0] for r in rows(resolve("ds"))] == [1, 1, 3, 4]


def test_rerun_gives_same_version_and_quarantines_once() -> None:
    make()
    spec = {"steps": [{"cast": {"columns": {"age": "INTEGER"}}}]}
    first = clean("ds@1", spec)
    again = clean("ds@1", spec)
    assert first.created and not again.created
    assert again.version.ref == first.version.ref
    assert len(list_quarantine("ds")) == 2


def test_drop_duplicates_keeps_first_and_drop_nulls() -> None:
    make(
        "SELECT * FROM (VALUES (1, 'a', 1), (2, 'b', NULL), (1, 'a', 1), (3, NULL, NULL), "
        "(2, 'c', 5)) t(k, s, n)"
    )
    v = clean("ds", {"steps": [{"drop_duplicates": {}}]}).version
    assert rows(v) == [(1, "a", 1), (2, "b", None), (3, None, None), (2, "c", 5)]
    v = clean("ds@1", {"steps": [{"drop_duplicates": {"subset": ["k"]}}]}).version
    assert rows(v) == [(1, "a", 1), (2, "b", None), (3, None, None)]
    v = clean("ds@1", {"steps": [{"drop_nulls": {"columns": ["s", "n"], "how": "all"}}]}).version
    assert [r[0] for r in rows(v)] == [1, 2, 1, 2]
    v = clean("ds@1", {"steps": [{"drop_nulls": None}]}).version
    assert rows(v) == [(1, "a", 1), (1, "a", 1), (2, "c", 5)]


def test_clip_by_quantiles_and_bounds() -> None:
    make("SELECT range::DOUBLE AS x, range AS i FROM range(1, 101)")
    v = clean(
        "ds",
        {"steps": [{"clip": {"columns": ["x"], "lower_quantile": 0.1, "upper_quantile": 0.9}}]},
    ).version
    lo, hi = v.transform["steps"][0]["bounds"]["x"]
    assert lo == pytest.approx(10.9) and hi == pytest.approx(90.1)
    values = [r[0] for r in rows(v)]
    assert min(values) == pytest.approx(10.9) and max(values) == pytest.approx(90.1)
    assert values[50] == 51.0
    v = clean("ds@1", {"steps": [{"clip": {"columns": ["i"], "upper": 10}}]}).version
    assert [r[1] for r in rows(v)][8:12] == [9, 10, 10, 10]
    assert v.schema[1]["type"] == "BIGINT"


def test_fill_strategies_and_text_steps() -> None:
    make(
        "SELECT * FROM (VALUES (1, 'ＡＢＣ  x ', 'tel: 555'), (NULL, NULL, 'a-b'),"
        " (3, ' d\te', NULL), (3, 'q', 'z')) t(n, s, p)"
    )
    spec = {
        "steps": [
            {"fill_nulls": {"strategy": {"n": "mode", "s": "mode"}}},
            {"normalize_text": {"columns": ["s"], "unicode": "nfkc", "lower": True}},
            {"regex_replace": {"column": "p", "pattern": "[^0-9a-z]", "replacement": ""}},
        ]
    }
    v = clean("ds", spec).version
    got = rows(v)
    assert [r[0] for r in got] == [1, 3, 3, 3]
    assert [r[1] for r in got][0] == "abc x" and got[2][1] == "d e"
    assert [r[2] for r in got] == ["tel555", "ab", None, "z"]
    v = clean("ds@1", {"steps": [{"fill_nulls": {"strategy": {"n": "mean"}}}]}).version
    assert [r[0] for r in rows(v)] == [1, 2, 3, 3]  # mean 7/3 rounds to 2 in an INTEGER column


def test_output_and_stats() -> None:
    make()
    result = clean("ds", CleanSpec(steps=[Filter(where="income > 2")], stats=True), output="rich")
    v = result.version
    assert v.ref == "rich@1" and v.parents == ["ds@1"]
    assert v.transform["steps"][0]["rows"] == 3
    assert v.source == "clean(ds@1)"


def test_spec_errors_name_the_key_column_and_step() -> None:
    make()
    bad = [
        ({"steps": [{"filter": {"wher": "x"}}]}, "steps.0.filter.wher: unknown key"),
        ({"steps": [{"filtr": {"where": "x"}}]}, "unknown step 'filtr'"),
        (
            {"steps": [{"drop_nulls": {"columns": ["zz"]}}]},
            "step 1 (drop_nulls): unknown column 'zz'",
        ),
        ({"steps": [{"filter": {"where": "nope > 1"}}]}, "step 1 (filter): SQL error"),
        ({"steps": [{"cast": {"columns": {"age": "INTEGR"}}}]}, "unknown type 'INTEGR'"),
        (
            {"steps": [{"clip": {"columns": ["name"], "upper": 1}}]},
            "'name' is VARCHAR, not numeric",
        ),
        ({"steps": [{"fill_nulls": {"values": {"id": "x"}}}]}, "'x' is not a valid INTEGER"),
        ({"steps": [{"rename": {"columns": {"id": "name"}}}]}, "two columns named 'name'"),
        ({"steps": [{"regex_replace": {"column": "name", "pattern": "("}}]}, "pattern: SQL error"),
    ]
    for spec, message in bad:
        with pytest.raises(
            InvalidInputError, match=message.replace("(", r"\(").replace(")", r"\)")
        ):
            clean("ds", spec)
    with pytest.raises(NotFoundError):
        clean("missing", {"steps": [{"drop_nulls": {}}]})


def test_user_sql_cannot_read_files_outside_the_lake(tmp_path: Path) -> None:
    make()
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    where = f"id IN (SELECT a FROM read_csv('{secret}'))"
    with pytest.raises(InvalidInputError, match="SQL error: Permission Error"):
        clean("ds", {"steps": [{"filter": {"where": where}}]})


def test_cli_clean(cli, tmp_path: Path) -> None:
    make()
    spec = tmp_path / "clean.yaml"
    spec.write_text("steps:\n  - drop_duplicates: {subset: [id]}\n  - filter: {where: 'id > 1'}\n")
    r = cli("data", "clean", "ds", "-f", spec, "--json")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["version"]["ref"] == "ds@2" and out["created"] is True
    assert out["version"]["num_rows"] == 4 and out["version"]["parents"] == ["ds@1"]
    r = cli("data", "clean", "ds@1", "-f", spec, "--output", "other")
    assert r.exit_code == 0 and "other@1" in r.stdout and "drop_duplicates" in r.stdout


def test_cli_clean_bad_input(cli, tmp_path: Path) -> None:
    make()
    spec = tmp_path / "clean.yaml"
    spec.write_text("steps:\n  - drop_nulls: {}\n  - filter: {wher: 'id > 1'}\n")
    r = cli("data", "clean", "ds", "-f", spec)
    assert r.exit_code == 2
    assert r.stderr.startswith(f"error: {spec}: ")
    assert "steps.1.filter.wher: unknown key" in r.stderr
    spec.write_text("steps:\n  - filter: {where: 'id >>> 1'}\n")
    r = cli("data", "clean", "ds", "-f", spec)
    assert r.exit_code == 2 and "step 1 (filter): SQL error" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    r = cli("data", "clean", "nope", "-f", spec)
    assert r.exit_code == 1 and "dataset 'nope' not found" in r.stderr
    r = cli("data", "clean", "ds", "-f", tmp_path / "absent.yaml")
    assert r.exit_code == 2 and "file not found" in r.stderr


def test_row_order_survives_dedup_on_many_rows() -> None:
    make("SELECT (range * 7919) % 5000 AS k, range AS i FROM range(30000)")
    v = clean(
        "ds",
        {
            "steps": [
                {"drop_duplicates": {"subset": ["k"]}},
                {"cast": {"columns": {"k": "VARCHAR"}}},
            ]
        },
    ).version
    seen: set[int] = set()
    expected = []
    for i in range(30000):
        k = (i * 7919) % 5000
        if k not in seen:
            seen.add(k)
            expected.append(i)
    assert [r[1] for r in rows(v)] == expected
