from __future__ import annotations

import json

import duckdb
import pytest

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data.catalog import VersionInfo, commit_query, resolve
from aifab.data.splits import SplitSpec, split


def _make(n: int = 200) -> VersionInfo:
    # 200 rows: class 'a' on 3 in 4 rows (150), 'b' on the rest (50); ts increases with i.
    return commit_query(
        "ds",
        f"SELECT range AS i, CASE WHEN range % 4 = 0 THEN 'b' ELSE 'a' END AS y, "
        f"TIMESTAMP '2024-01-01' + to_days(CAST(range AS INTEGER)) AS ts FROM range({n})",
        source="test",
        transform={"kind": "test"},
    ).version


def _rows(v: VersionInfo) -> list[tuple]:
    return duckdb.sql(f"SELECT * FROM {v.scan_sql()}").fetchall()


def _assignment(v: VersionInfo) -> list[str]:
    return [r[-1] for r in _rows(v)]


def test_random_split_exact_sizes_keeps_rows_and_order() -> None:
    src = _make()
    out = split("ds", {"seed": 7}).version
    rows = _rows(out)
    assert [r[0] for r in rows] == list(range(200))
    assert out.columns == ["i", "y", "ts", "split"]
    assignment = [r[-1] for r in rows]
    assert (assignment.count("train"), assignment.count("valid"), assignment.count("test")) == (
        160,
        20,
        20,
    )
    assert out.parents == [src.ref]
    assert out.transform["kind"] == "split"
    assert out.transform["spec"]["seed"] == 7
    assert out.transform["counts"] == {"train": 160, "valid": 20, "test": 20}


def test_same_seed_same_split_different_seed_different() -> None:
    _make()
    a = _assignment(split("ds@1", {"seed": 1}, output="a").version)
    b = _assignment(split("ds@1", {"seed": 1}, output="b").version)
    c = _assignment(split("ds@1", {"seed": 2}, output="c").version)
    assert a == b
    assert a != c
    # the split is shuffled, not a block of the first rows
    assert a[:160] != ["train"] * 160


def test_resplitting_replaces_the_split_column() -> None:
    _make()
    split("ds", {"seed": 1})
    out = split("ds", {"seed": 2}).version
    assert out.columns.count("split") == 1


def test_stratified_preserves_class_proportions() -> None:
    _make()
    out = split(
        "ds",
        {
            "method": "stratified",
            "by": "y",
            "seed": 3,
            "fractions": {"train": 0.6, "valid": 0.2, "test": 0.2},
        },
    ).version
    counts = dict(
        ((y, s), n)
        for y, s, n in duckdb.sql(
            f"SELECT y, split, count(*) FROM {out.scan_sql()} GROUP BY ALL"
        ).fetchall()
    )
    assert counts == {
        ("a", "train"): 90,
        ("a", "valid"): 30,
        ("a", "test"): 30,
        ("b", "train"): 30,
        ("b", "valid"): 10,
        ("b", "test"): 10,
    }
    assert out.transform["counts"]["by_class"]["b"] == {"train": 30, "valid": 10, "test": 10}


def test_time_split_oldest_train_newest_test() -> None:
    _make(100)
    out = split("ds", {"method": "time", "by": "ts"}).version
    rows = _rows(out)
    assert {r[-1] for r in rows[:80]} == {"train"}
    assert {r[-1] for r in rows[80:90]} == {"valid"}
    assert {r[-1] for r in rows[90:]} == {"test"}


def test_bad_specs_are_named() -> None:
    _make(10)
    with pytest.raises(InvalidInputError, match="fractions must sum to 1"):
        split("ds", {"fractions": {"train": 0.5, "valid": 0.1, "test": 0.1}})
    with pytest.raises(InvalidInputError, match="needs 'by'"):
        split("ds", {"method": "stratified"})
    with pytest.raises(InvalidInputError, match="by: column 'nope' not found"):
        split("ds", {"method": "time", "by": "nope"})
    with pytest.raises(InvalidInputError, match="seeed: unknown key"):
        split("ds", {"seeed": 1})
    with pytest.raises(NotFoundError):
        split("missing", SplitSpec())


def test_cli_split(cli, tmp_path) -> None:
    _make(50)
    spec = tmp_path / "split.yaml"
    spec.write_text("method: stratified\nby: y\nseed: 4\n")
    r = cli(
        "data",
        "split",
        "ds",
        "-f",
        spec,
        "--train",
        "0.6",
        "--valid",
        "0.2",
        "--test",
        "0.2",
        "--output",
        "ds_split",
        "--json",
    )
    assert r.exit_code == 0, r.stderr
    body = json.loads(r.stdout)
    assert body["version"] == "ds_split@1"
    assert body["train"] + body["valid"] + body["test"] == 50
    assert resolve("ds_split").transform["spec"]["method"] == "stratified"


def test_cli_split_bad_input(cli) -> None:
    _make(10)
    r = cli("data", "split", "ds", "--train", "0.9")
    assert r.exit_code == 2
    assert "fractions must sum to 1" in r.stderr
    r = cli("data", "split", "ds", "--method", "time", "--by", "when")
    assert r.exit_code == 2
    assert "column 'when' not found" in r.stderr
    r = cli("data", "split", "nope")
    assert r.exit_code != 0
    assert "not found" in r.stderr


def _ties() -> None:
    # 10 rows over 4 timestamps: a cut at 80% falls inside the run of day-3 rows.
    commit_query(
        "events",
        "SELECT range AS id, DATE '2024-01-01' + CAST(CASE WHEN range < 2 THEN 0 "
        "WHEN range < 4 THEN 1 WHEN range < 9 THEN 2 ELSE 3 END AS INTEGER) AS day "
        "FROM range(10)",
        source="test",
        transform={"kind": "test"},
    )


def test_time_split_never_splits_a_tie() -> None:
    _ties()
    v = split("events", {"method": "time", "by": "day"}).version
    rows = duckdb.sql(f"SELECT day, split FROM {v.scan_sql()}").fetchall()
    sides: dict = {}
    for day, s in rows:
        sides.setdefault(day, set()).add(s)
    assert all(len(s) == 1 for s in sides.values()), sides
    order = {"train": 0, "valid": 1, "test": 2}
    days = sorted(sides)
    assert [order[next(iter(sides[d]))] for d in days] == sorted(
        order[next(iter(sides[d]))] for d in days
    )
    counts = v.transform["counts"]
    assert counts == {s: sum(1 for _, x in rows if x == s) for s in ("train", "valid", "test")}


def test_stratified_split_with_single_row_classes_names_them() -> None:
    commit_query(
        "rare",
        "SELECT range AS id, CASE WHEN range = 0 THEN 'unicorn' WHEN range = 1 THEN 'yeti' "
        "ELSE 'cat' END AS y FROM range(30)",
        source="test",
        transform={"kind": "test"},
    )
    with pytest.raises(InvalidInputError, match="one row.*unicorn.*yeti"):
        split("rare", {"method": "stratified", "by": "y"})
