"""The Ray engine's per-block work, without Ray: read tasks, row numbers, block SQL."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aifab.data.engines import blocks


def test_read_tasks_number_rows_across_files_and_row_groups(tmp_path: Path) -> None:
    files = []
    for n, (rows, group) in enumerate([(10, 4), (7, 7)]):
        f = tmp_path / f"{n}.parquet"
        pq.write_table(pa.table({"v": list(range(rows))}), f, row_group_size=group)
        files.append(f)
    tasks = blocks.read_tasks(files, block_rows=3)
    # 10 rows in groups of 4 -> 4,4,2 -> blocks 3+1, 3+1, 2; then 7 rows -> 3, 3, 1.
    assert [t["length"] for t in tasks] == [3, 1, 3, 1, 2, 3, 3, 1]
    rn = np.concatenate([blocks.read_block(t, "rn")["rn"].to_numpy() for t in tasks])
    assert rn.tolist() == list(range(1, 18))
    values = [v for t in tasks for v in blocks.read_block(t, None)["v"].to_pylist()]
    assert values == list(range(10)) + list(range(7))


def test_read_tasks_read_objects_on_a_store_by_key(tmp_path: Path, s3_storage: str) -> None:
    """Tasks over a store (moto's S3 stand-in) name the store and the key, not a local file."""
    from aifab.core.storage import get_store

    store = get_store()
    local = tmp_path / "t.parquet"
    pq.write_table(pa.table({"v": list(range(10))}), local, row_group_size=4)
    store.put_file(local, "lake/objects/t.parquet")
    local.unlink()
    tasks = blocks.read_tasks([store.path("lake/objects/t.parquet")], 3, store.uri)
    assert {t["store"] for t in tasks} == {s3_storage}
    assert [t["length"] for t in tasks] == [3, 1, 3, 1, 2]
    values = [v for t in tasks for v in blocks.read_block(t, None)["v"].to_pylist()]
    assert values == list(range(10))


def test_block_sql_cannot_reach_files(tmp_path: Path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    table = pa.table({"x": [1, 2]})
    assert blocks.run_sql(table, f"SELECT x * 2 AS y FROM {blocks.BLOCK}")["y"].to_pylist() == [
        2,
        4,
    ]
    with pytest.raises(duckdb.Error):
        blocks.run_sql(table, f"SELECT * FROM read_csv('{secret}')")


def test_refinement_path_masks_the_same_values_on_every_block() -> None:
    values = np.array([0.0, 0.5, 1.0, 2.5, 10.0])
    # Bin 0 of 4 over [0, 10] holds 0, 0.5, 1; bin 1 of 2 over [0, 1] of those, 0.5 and 1.
    path = [(0.0, 10.0, 4, 0), (0.0, 1.0, 2, 1)]
    assert values[blocks.in_path(values, path)].tolist() == [0.5, 1.0]
    for split in (values[:2], values[2:]):  # per block, the same membership
        assert split[blocks.in_path(split, path)].tolist() == [v for v in split if v in (0.5, 1.0)]
