"""Pages of the catalog for long lists (the dashboard): versions, datasets and quarantine."""

from __future__ import annotations

import pytest

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data import (
    head,
    list_datasets,
    list_quarantine,
    list_version_summaries,
    quarantine,
)
from aifab.data.catalog import commit_query
from aifab.data.quarantine import QuarantineItem

GEN = "SELECT range AS x FROM range({n})"


def test_version_summaries_are_pages_newest_first() -> None:
    for n in range(1, 8):
        commit_query("paged", GEN.format(n=n), source=f"gen{n}", transform={"kind": "test"})
    first = list_version_summaries("paged", limit=3)
    assert [v["ref"] for v in first] == ["paged@7", "paged@6", "paged@5"]
    assert first[0]["num_rows"] == 7 and first[0]["transform"] == "test"
    assert first[0]["source"] == "gen7" and len(first[0]["content_hash"]) == 64
    assert "profile" not in first[0] and "schema" not in first[0]
    assert [v["version"] for v in list_version_summaries("paged", offset=3, limit=3)] == [4, 3, 2]
    assert [v["version"] for v in list_version_summaries("paged", offset=6, limit=3)] == [1]
    assert list_version_summaries("paged", offset=100) == []


def test_version_summaries_refuse_bad_bounds_and_unknown_datasets() -> None:
    commit_query("paged", GEN.format(n=1), source="gen", transform={"kind": "test"})
    with pytest.raises(InvalidInputError, match="offset"):
        list_version_summaries("paged", offset=-1)
    with pytest.raises(InvalidInputError, match="limit"):
        list_version_summaries("paged", limit=0)
    with pytest.raises(NotFoundError, match="'nope'"):
        list_version_summaries("nope")


def test_datasets_and_quarantine_page_by_offset() -> None:
    for name in ("c", "a", "b"):
        commit_query(name, GEN.format(n=2), source="gen", transform={"kind": "test"})
    assert [d["name"] for d in list_datasets()] == ["a", "b", "c"]
    assert [d["name"] for d in list_datasets(offset=1, limit=1)] == ["b"]
    assert [d["name"] for d in list_datasets(offset=2, limit=5)] == ["c"]
    items = [QuarantineItem("rule", f"reason {i}", {"i": i}, i) for i in range(5)]
    assert quarantine("a", "ingest", items) == 5
    newest = list_quarantine("a", limit=2)
    assert [q["reason"] for q in newest] == ["reason 4", "reason 3"]
    assert [q["reason"] for q in list_quarantine("a", limit=2, offset=4)] == ["reason 0"]


def test_head_reads_only_the_columns_asked_for() -> None:
    commit_query("h", "SELECT range AS a, -range AS b, 'x' AS c FROM range(5)", source="g",
                 transform={"kind": "test"})  # fmt: skip
    table = head("h", 2, ["c", "a"])
    assert table.column_names == ["c", "a"] and table.to_pylist() == [
        {"c": "x", "a": 0},
        {"c": "x", "a": 1},
    ]
    assert head("h", 1).column_names == ["a", "b", "c"]
    with pytest.raises(InvalidInputError, match="no column 'zz'"):
        head("h", 1, ["a", "zz"])
    with pytest.raises(InvalidInputError, match="at least one column"):
        head("h", 1, [])
