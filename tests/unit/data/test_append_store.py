"""Pending pushed batches on an object store (moto's S3 server, the stand-in for S3/MinIO):
another machine (an empty AIFAB_HOME, the same DB and store) sees and seals them, a batch is
sealed exactly once even when its object outlives the seal, and bad batches are set aside."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from aifab.core.storage import get_store
from aifab.data import append_records, flush_appends, list_versions, query

PENDING = "lake/pending/ev"


@pytest.fixture(autouse=True)
def _on_s3(s3_storage: str) -> str:
    return s3_storage


def _batches() -> list[str]:
    return [k for k in get_store().list(PENDING) if k.count("/") == 3]


def test_batches_are_objects_another_node_counts_and_seals(
    workspace: Path, other_node: Callable[[], Path]
) -> None:
    r = append_records("ev", [{"dev": "a", "t": 1.0}, {"dev": "b", "t": 2.0}], batch_rows=100)
    assert r.pending_rows == 2 and len(_batches()) == 1
    assert not (workspace / "lake" / "pending" / "ev").exists()  # nothing kept on this disk
    home = other_node()
    r2 = append_records("ev", [{"dev": "c", "t": 3.0}], batch_rows=100)
    assert r2.pending_rows == 3  # the first node's rows are pending here too
    v = flush_appends("ev")
    assert v is not None and v.ref == "ev@1" and v.num_rows == 3
    assert _batches() == [] and not (home / "lake" / "pending").exists()
    assert query("SELECT dev FROM ev ORDER BY t").column("dev").to_pylist() == list("abc")
    r3 = append_records("ev", [{"dev": "d", "t": 4.0}], flush=True)
    assert r3.version is not None and r3.version.ref == "ev@2" and r3.version.num_rows == 4
    assert r3.pending_rows == 0


def test_a_seal_that_died_before_its_deletes_is_not_sealed_again() -> None:
    append_records("ev", [{"dev": "a", "t": 1.0}], batch_rows=100)
    append_records("ev", [{"dev": "b", "t": 2.0}], batch_rows=100)
    store = get_store()
    kept = {k: store.read_bytes(k) for k in _batches()}
    assert len(kept) == 2
    assert flush_appends("ev") is not None
    for key, data in kept.items():  # the objects still there, the ids recorded as sealed
        store.write_bytes(key, data)
    r = append_records("ev", [], flush=True)
    assert r.version is None and r.pending_rows == 0
    assert _batches() == []
    assert [v.num_rows for v in list_versions("ev")] == [2]
    # a new batch next to a leftover one: only the new rows are sealed
    store.write_bytes(next(iter(kept)), next(iter(kept.values())))
    v = append_records("ev", [{"dev": "c", "t": 3.0}], flush=True).version
    assert v is not None and v.num_rows == 3
    assert query("SELECT dev FROM ev ORDER BY t").column("dev").to_pylist() == list("abc")


def test_an_unreadable_batch_is_set_aside_and_the_others_seal() -> None:
    append_records("ev", [{"dev": "a", "t": 1.0}], batch_rows=100)
    store = get_store()
    store.write_bytes(f"{PENDING}/batch_0_junk_1.parquet", b"not parquet")
    v = flush_appends("ev")
    assert v is not None and v.num_rows == 1
    assert _batches() == []
    failed = store.list(f"{PENDING}/failed")
    assert failed == [
        f"{PENDING}/failed/batch_0_junk_1.parquet",
        f"{PENDING}/failed/batch_0_junk_1.parquet.json",
    ]
