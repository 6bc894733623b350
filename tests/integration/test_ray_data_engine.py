"""``engine: ray`` against the DuckDB engine on messy data, on one small local Ray instance
(module-scoped: Ray starts slowly). Equality is checked on the committed content hash (rows,
order and column types), the lineage record and the quarantine."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any

import duckdb
import pytest

from aifab.core.errors import InvalidInputError
from aifab.data.catalog import commit_query
from aifab.data.clean import clean
from aifab.data.engines import ray_data, ray_stats
from aifab.data.quarantine import list_quarantine

pytestmark = pytest.mark.integration

#: Object store of the test instance, the smallest Ray accepts (a few of its blocks fit).
OBJECT_STORE = 80 * 1024 * 1024

MESSY = """SELECT i % 700 AS id,
  CASE WHEN i % 97 = 0 THEN NULL WHEN i % 89 = 0 THEN 'x' || i
       ELSE CAST((i * 7919) % 1000 AS VARCHAR) END AS age,
  CASE WHEN i % 13 = 0 THEN NULL WHEN i % 501 = 0 THEN 1e9
       ELSE ((i * 104729) % 100003) / 8.0 END AS income,
  CASE WHEN i % 11 = 0 THEN NULL
       ELSE '  Ｍail ' || (i % 300) || '@x.org   call 555-123-4567 card 4111 1111 1111 1111 '
  END AS note,
  CASE WHEN i % 17 = 0 THEN NULL ELSE ['red', 'green', 'blue', 'red'][1 + i % 4] END AS color
FROM range(3000) t(i)"""

STEPS: list[dict[str, Any]] = [
    {"drop_duplicates": {"subset": ["id", "color"]}},
    {"cast": {"columns": {"age": "INTEGER"}}},
    {
        "fill_nulls": {
            "values": {"note": "?"},
            "strategy": {"income": "median", "age": "mean", "color": "mode"},
        }
    },
    {"clip": {"columns": ["income"], "lower_quantile": 0.05, "upper_quantile": 0.95}},
    {"normalize_text": {"columns": ["note"], "lower": True, "unicode": "nfkc"}},
    {"redact_pii": {"columns": ["note"]}},
    {"regex_replace": {"column": "note", "pattern": "mail (\\d+)", "replacement": "m\\1"}},
    {"drop_near_duplicates": {"column": "note", "threshold": 0.9}},
    {"filter": {"where": "age >= 10"}},
    {"drop_nulls": {"columns": ["color"]}},
    {"rename": {"columns": {"note": "text"}}},
]


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(
        num_cpus=2,
        object_store_memory=OBJECT_STORE,
        include_dashboard=False,
        log_to_driver=False,
        namespace="aifab-data",
    )
    yield ray
    ray.shutdown()
    if saved is None:
        os.environ.pop("RAY_AUTH_MODE", None)
    else:
        os.environ["RAY_AUTH_MODE"] = saved


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 400 rows, so a 3000-row table is spread over eight blocks."""
    monkeypatch.setattr(ray_data, "BLOCK_ROWS", 400)


def test_ray_engine_equals_duckdb_on_messy_data(ray_local: Any, small_blocks: None) -> None:
    commit_query("raw", MESSY, source="test", transform={"kind": "test"})
    duck = clean("raw", {"steps": STEPS, "stats": True}, output="by_duckdb").version
    ray_v = clean("raw", {"steps": STEPS, "stats": True, "engine": "ray"}, output="by_ray").version
    # Same rows, order and column types (the hash covers all three).
    assert ray_v.content_hash == duck.content_hash and ray_v.num_rows == duck.num_rows > 0
    assert ray_v.schema == duck.schema
    # Same lineage: parent, source and per-step record (statistics, row counts, bounds).
    assert ray_v.parents == duck.parents == ["raw@1"] and ray_v.source == duck.source
    assert ray_v.transform["steps"] == duck.transform["steps"]
    assert ray_v.transform["spec"] == {**duck.transform["spec"], "engine": "ray"}
    # Same quarantine rows and reasons, once per run, under the input dataset.
    items = list_quarantine("raw", stage="clean", limit=10_000)
    assert len(items) % 2 == 0 and items
    half = len(items) // 2
    key = [(i["rule"], i["reason"], i["line"], i["record"], i["version_id"]) for i in items]
    assert sorted(key[:half], key=str) == sorted(key[half:], key=str)


def test_ray_engine_rejects_bad_input_like_duckdb(ray_local: Any) -> None:
    commit_query("raw", MESSY, source="test", transform={"kind": "test"})
    for steps in (
        [{"fill_nulls": {"strategy": {"nope": "mean"}}}],
        [{"clip": {"columns": ["note"], "lower": 0}}],
        [{"filter": {"where": "read_csv('/etc/passwd') IS NOT NULL"}}],
        [{"cast": {"columns": {"age": "NOTATYPE"}}}],
    ):
        messages = []
        for engine in ("duckdb", "ray"):
            with pytest.raises(InvalidInputError) as err:
                clean("raw", {"steps": steps, "engine": engine}, output="out")
            messages.append(str(err.value))
        assert messages[0] == messages[1]


@pytest.mark.parametrize(
    "values",
    [
        "SELECT (i * 7919) % 10007 / 3.0 AS v FROM range(5000) t(i)",  # spread out
        "SELECT CASE WHEN i % 50 = 0 THEN 1e12 ELSE i % 7 END AS v FROM range(5000) t(i)",  # ties
        "SELECT CASE WHEN i % 3 = 0 THEN NULL ELSE exp(i / 400.0) END AS v FROM range(5000) t(i)",
        "SELECT CAST(i % 2 AS BIGINT) AS v FROM range(5001) t(i)",
        "SELECT CAST(NULL AS DOUBLE) AS v FROM range(10) t(i)",
    ],
)
def test_quantiles_are_exact(
    ray_local: Any, small_blocks: None, monkeypatch: pytest.MonkeyPatch, values: str
) -> None:
    """Exact, not sketched. Stated tolerance: one ulp for quantiles and medians (DuckDB's
    interpolation rounds as its compiler fuses it; we emulate this build's fused form and
    match it to the bit here), 1e-12 relative for means (the engines sum in other orders)."""
    # A bin is refined, not gathered, past 64 values: the refinement passes run too.
    monkeypatch.setattr(ray_stats, "GATHER_MAX", 64)
    v = commit_query("q", values, source="test", transform={"kind": "test"}).version
    ds, _ = ray_data.read_version(v, "__aifab_rn")
    qs = [0.0, 0.01, 0.25, 0.5, 0.77, 0.99, 1.0]
    got = ray_stats.quantiles(ds, "v", qs)
    con = duckdb.connect()
    want = con.execute(f"SELECT quantile_cont(v, {qs}), avg(v) FROM {v.scan_sql()}").fetchone()
    assert want is not None
    if want[0] is None:
        assert got == [None] * len(qs)
    else:
        assert [abs(g - w) <= math.ulp(w) for g, w in zip(got, want[0], strict=True)] == [True] * 7
    mean = ray_stats.mean(ds, "v")
    if want[1] is None:
        assert mean is None
    else:
        assert mean is not None and math.isclose(mean, want[1], rel_tol=1e-12)
