"""Column profiles: linear in the number of columns, and NaN/inf counted rather than fatal."""

from __future__ import annotations

import math

import duckdb
import pytest

from aifab.data.catalog import commit_query
from aifab.data.profile import HISTOGRAM_BINS, profile_relation


def _wide(con: duckdb.DuckDBPyConnection, ncol: int, nrow: int) -> None:
    """Alternating integer and string columns with known statistics."""
    cols = ", ".join(
        f"(range * {i + 1}) % 997 AS c{i}" if i % 2 else f"'s' || ((range + {i}) % 50) AS c{i}"
        for i in range(ncol)
    )
    con.execute(f"CREATE TABLE wide AS SELECT {cols} FROM range({nrow})")


def test_wide_table_profiles_within_a_small_memory_limit() -> None:
    # One aggregate over every column ran out of 300 MB at 300 columns x 2,000 rows.
    con = duckdb.connect()
    con.execute("SET threads=2")
    con.execute("SET memory_limit='300MB'")
    _wide(con, 300, 2000)
    profile = profile_relation(con, "wide")
    assert profile["num_rows"] == 2000 and len(profile["columns"]) == 300
    for i in (0, 1, 150, 299):
        name = f"c{i}"
        exp = con.execute(
            f"SELECT count(DISTINCT {name}), min({name}), max({name}) FROM wide"
        ).fetchone()
        assert exp is not None
        col = profile["columns"][name]
        assert col["null_share"] == 0.0
        assert col["distinct"] == pytest.approx(exp[0], rel=0.1)
        if i % 2:
            assert (col["min"], col["max"]) == (exp[1], exp[2])
            assert sum(col["histogram"]["counts"]) == 2000
        else:
            assert col["kind"] == "string" and len(col["top_values"]) == 10
            assert col["top_values"][0][1] == 40  # 50 values, 2,000 rows
            exact = con.execute(
                f"SELECT {name}, count(*) AS n FROM wide GROUP BY ALL ORDER BY n DESC, {name} "
                "LIMIT 10"
            ).fetchall()
            assert col["top_values"] == [[v, n] for v, n in exact]


@pytest.mark.parametrize("col_type", ["DOUBLE", "FLOAT"])
def test_nan_and_inf_are_counted_and_left_out_of_statistics(col_type: str) -> None:
    con = duckdb.connect()
    con.execute(
        f"CREATE TABLE t AS SELECT CAST(v AS {col_type}) AS x, i FROM (VALUES "
        "('1.0', 1), ('2.0', 2), ('nan', 3), ('inf', 4), ('-inf', 5), ('3.0', 6), (NULL, 7)"
        ") v(v, i)"
    )
    col = profile_relation(con, "t")["columns"]["x"]
    assert (col["nan_count"], col["posinf_count"], col["neginf_count"]) == (1, 1, 1)
    assert (col["min"], col["max"], col["mean"]) == (1.0, 3.0, 2.0)
    assert col["std"] == pytest.approx(1.0)
    assert all(math.isfinite(v) for v in col["quantiles"].values())
    assert sum(col["histogram"]["counts"]) == 3
    assert len(col["histogram"]["counts"]) == HISTOGRAM_BINS
    assert col["null_share"] == pytest.approx(1 / 7)
    ints = profile_relation(con, "t")["columns"]["i"]
    assert ints["nan_count"] == 0 and ints["max"] == 7


def test_only_non_finite_and_huge_ranges() -> None:
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT * FROM (VALUES "
        "('nan'::DOUBLE, -1.7e308::DOUBLE, 5::DECIMAL(10,2)), "
        "('inf'::DOUBLE, 1.7e308::DOUBLE, 6::DECIMAL(10,2))) v(a, b, d)"
    )
    cols = profile_relation(con, "t")["columns"]
    assert cols["a"]["min"] is None and cols["a"]["nan_count"] == 1
    assert "histogram" not in cols["a"]
    assert sum(cols["b"]["histogram"]["counts"]) == 2
    assert cols["d"]["min"] == 5.0 and cols["d"]["nan_count"] == 0


def test_commit_of_a_version_with_nan_and_inf_profiles_it() -> None:
    v = commit_query(
        "nums",
        "SELECT * FROM (VALUES (1.5), ('nan'::DOUBLE), ('inf'::DOUBLE), (2.5)) t(x)",
        source="test",
        transform={"kind": "test"},
    ).version
    col = v.profile["columns"]["x"]
    assert col["nan_count"] == 1 and col["posinf_count"] == 1 and col["mean"] == 2.0


def test_wide_short_tables_profile_long_with_the_same_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Wide, short tables are profiled per column type over unpivoted rows (linear in the
    # columns); the result must be the one the per-batch queries give.
    from aifab.data import profile

    con = duckdb.connect()
    kinds = [
        *(f"(random() * 100)::BIGINT AS i{k}" for k in range(20)),
        *(f"CASE WHEN r % 7 = 0 THEN NULL ELSE random() * 10 END AS d{k}" for k in range(20)),
        *(f"md5((r % 13)::VARCHAR) AS s{k}" for k in range(15)),
        "r % 2 = 0 AS b0",
        "DATE '2024-01-01' + (r % 30)::INTEGER AS t0",
        "NULL::DOUBLE AS all_null",
        "[r] AS a_list",
        "CASE WHEN r % 3 = 0 THEN 'inf'::DOUBLE ELSE r END AS with_inf",
    ]
    con.execute(f"CREATE TABLE t AS SELECT {', '.join(kinds)} FROM range(300) x(r)")
    long = profile_relation(con, "t")
    monkeypatch.setattr(profile, "LONG_MAX_CELLS", 0)
    assert profile_relation(con, "t") == long
    assert list(long["columns"]) == [k.rsplit(" AS ", 1)[1] for k in kinds]
