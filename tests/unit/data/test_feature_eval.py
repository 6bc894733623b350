"""The NumPy evaluator of a fitted transform equals the DuckDB projection, bit for bit.

Floats are compared by ``repr`` (exact round-trip, NaN and -0.0 included), so "equal" here
means bit-equal, TF-IDF vectors included (no tolerance is needed anywhere).
"""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest

from aifab.data.catalog import commit_query
from aifab.data.feature_eval import md5_bucket
from aifab.data.features import fit_features

ROWS = """
(1, 1.0, 3, true, 'US', D '2024-03-05', T '2024-03-05 10:30', 'the cat sat', 'train'),
(2, 2.0, 3, false, 'US', D '2024-03-06', T '2024-03-06 23:00', 'the dog sat', 'train'),
(3, 3.0, 7, true, 'FR', D '2024-12-31', T '2024-12-31 00:00', 'a cat and a dog', 'train'),
(4, 4.5, 9, false, 'DE', D '2024-01-01', T '2024-01-01 05:00', 'cat cat cat', 'train'),
(5, 1e6, 11, NULL, 'ZZ', D '2030-01-01', T '2030-01-01 00:00', 'zebra zebra', 'test'),
(6, NULL, NULL, true, NULL, NULL, NULL, NULL, 'test'),
(7, 'nan'::DOUBLE, -4, false, '', D '1969-07-20', T '1900-02-28 13:14', '', 'test'),
(8, 'inf'::DOUBLE, 0, true, 'Ünïcødé 猫', D '2000-02-29', T '2000-02-29 00:59', 'Cat DOG', 'test'),
(9, '-inf'::DOUBLE, 1, false, 'us', D '2024-03-10', T '2024-03-10 12:00', 'dog the', 'test'),
(10, -1.0, 2, true, 'FR ', D '2024-03-09', T '2024-03-09 01:00', 'sat sat', 'test'),
(11, -2.0, 3, true, 'DE', D '2024-03-08', T '2024-03-08 02:00', 'a a a', 'test'),
(12, -0.5, 3, false, 'US', D '2024-03-07', T '2024-03-07 03:00', 'the', 'test'),
(13, 0.1, 3, true, 'US', D '2024-03-06', T '2024-03-06 04:00', 'cat', 'test'),
(14, 3.5, 3, true, 'US', D '2024-03-06', T '2024-03-06 04:00', 'cat', 'test'),
(15, -0.0, 3, true, 'US', D '2024-03-06', T '2024-03-06 04:00', 'cat', 'test')
"""
COLUMNS = "id, amount, n, flag, country, d, ts, text, split"
SPEC = {
    "features": [
        {"transform": "standardize", "column": "amount", "name": "z"},
        {"transform": "standardize", "column": "flag", "name": "flag_z"},
        {"transform": "standardize", "column": "n", "name": "n_z"},
        {"transform": "minmax", "column": "amount", "name": "mm"},
        {"transform": "log1p", "column": "amount", "name": "log"},
        {"transform": "bucketize", "column": "amount", "name": "b", "boundaries": [-1, 2, 3.5]},
        {"transform": "onehot", "column": "country", "max_categories": 2},
        {"transform": "onehot", "column": "n", "name": "n_oh", "max_categories": 3},
        {"transform": "onehot", "column": "flag", "name": "flag_oh"},
        {"transform": "categorical", "column": "country", "name": "cc"},
        {"transform": "categorical", "column": "n", "name": "nc"},
        {"transform": "hash", "column": "country", "name": "ch", "buckets": 1000003},
        {"transform": "hash", "column": "n", "name": "nh", "buckets": 7},
        {"transform": "hash", "column": "flag", "name": "fh", "buckets": 5},
        {"transform": "date_parts", "column": "d"},
        {
            "transform": "date_parts",
            "column": "ts",
            "parts": ["year", "month", "day", "dayofweek", "hour"],
        },
        {"transform": "tfidf", "column": "text", "name": "tf"},
        {
            "transform": "tfidf",
            "column": "text",
            "name": "tf2",
            "ngram_max": 2,
            "sublinear_tf": True,
            "lowercase": False,
        },
    ],
    "passthrough": ["id", "split"],
}


@pytest.fixture
def fitted() -> tuple:
    rows = ROWS.replace("T '", "TIMESTAMP '").replace("D '", "DATE '")
    query = f"SELECT * FROM (VALUES {rows}) t({COLUMNS})"
    # Fitted on the train rows alone; NaN/inf rows are only transformed (the profile computed
    # at commit is not what is under test here).
    commit_query("ev", f"{query} WHERE split = 'train'", source="test", transform={})
    ft = fit_features("ev", SPEC).transform
    return ft, duckdb.sql(query).to_arrow_table()


def _bits(table: pa.Table) -> dict[str, str]:
    return {name: repr(table.column(name).to_pylist()) for name in table.column_names}


def test_numpy_equals_sql_on_every_transform_kind(fitted: tuple) -> None:
    ft, raw = fitted
    assert ft._compiled() is not None  # every kind above compiles: no silent SQL fallback
    sql = ft.transform_table(raw, engine="sql")
    fast = ft.transform_table(raw, engine="numpy")
    assert fast.schema == sql.schema
    assert _bits(fast) == _bits(sql)
    # the hard cases really are in there: NULLs, NaN, unknown categories, log1p's NULLs
    assert sql.column("country__unknown").to_pylist()[4:7] == [1, 1, 1]
    assert sql.column("log").null_count == 4  # NULL, -inf, -1 and -2
    assert sql.column("cc").to_pylist()[5] == 0


def test_each_row_alone_and_serving_shaped_rows(fitted: tuple) -> None:
    ft, raw = fitted
    served = raw.drop_columns(["split"])  # serving rows have no split column
    for i in range(served.num_rows):
        row = served.slice(i, 1)
        assert _bits(ft.transform_table(row)) == _bits(ft.transform_table(row, engine="sql"))
    nulls = pa.table({c.name: pa.nulls(1, c.type) for c in served.schema})
    assert _bits(ft.transform_table(nulls)) == _bits(ft.transform_table(nulls, engine="sql"))


def test_lossless_casts_run_in_numpy_and_others_fall_back(fitted: tuple) -> None:
    ft, raw = fitted
    ints = raw.set_column(1, "amount", pa.array([1, 2, None, 4] * 3 + [5, 6, 7], pa.int64()))
    assert ft._compiled()(ints) is not None
    assert _bits(ft.transform_table(ints)) == _bits(ft.transform_table(ints, engine="sql"))
    # text dates are parsed by DuckDB's CAST: the evaluator declines, the SQL answers
    texts = raw.set_column(5, "d", pa.array([None] * 14 + ["2024-03-05"]))
    assert ft._compiled()(texts) is None
    assert ft.transform_table(texts).column("d__year").to_pylist()[-1] == 2024


def test_hash_is_duckdbs_md5_number_lower() -> None:
    rng = random.Random(0)
    alphabet = "abcXYZ09 _-é猫😀\t"
    texts = ["", "a", *("".join(rng.choices(alphabet, k=rng.randint(1, 40))) for _ in range(300))]
    got = duckdb.execute(
        "SELECT CAST(md5_number_lower(t) % 9973 AS BIGINT) FROM unnest(?) u(t)", [texts]
    ).fetchall()
    assert [md5_bucket(t, 9973) for t in texts] == [r[0] for r in got]
