"""``engine: ray`` with the lake on an object store (moto's standalone S3 server, the named
stand-in for S3/MinIO): Ray's workers read their row groups from the store themselves, with the
credentials their own environment gives them, so the driver never fetches the input objects.
A small local Ray instance of its own (its workers get the store's settings at start)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aifab.data.catalog import commit_query
from aifab.data.clean import clean
from aifab.data.engines import ray_data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ray_local import local_ray  # noqa: E402

pytestmark = pytest.mark.integration

ROWS = """SELECT i AS id, CASE WHEN i % 7 = 0 THEN NULL ELSE (i * 31) % 1000 / 4.0 END AS x,
  ['a', 'b', 'c'][1 + i % 3] AS cat
FROM range(2000) t(i)"""


@pytest.fixture(scope="module")
def ray_with_store_env(s3_server: Any) -> Iterator[Any]:
    """Ray whose workers have the store's credentials and endpoint, as a team's nodes would."""
    clear = ("AIFAB_HOME", "AIFAB_STORAGE_URI", *s3_server.env)  # nothing of the driver's
    with local_ray("aifab-data-store", clear, env_vars=dict(s3_server.env)) as ray:
        yield ray


def test_workers_read_the_lake_from_the_store_not_through_the_driver(
    ray_with_store_env: Any,
    s3_storage: str,
    workspace: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import shutil

    from aifab.data import lake

    monkeypatch.setattr(ray_data, "BLOCK_ROWS", 300)  # several blocks from a small table
    raw = commit_query("raw", ROWS, source="test", transform={"kind": "test"}).version
    shutil.rmtree(workspace / "lake", ignore_errors=True)  # the driver's cache of the lake
    steps = [{"fill_nulls": {"strategy": {"x": "median"}}}, {"filter": {"where": "x > 10"}}]
    on_ray = clean("raw", {"steps": steps, "engine": "ray"}, output="on_ray").version
    cached = [k for k in raw.objects if (workspace / "lake" / k).exists()]
    assert cached == []  # the input's rows went from the store to the workers only
    duck = clean("raw", {"steps": steps}, output="by_duckdb").version
    assert on_ray.content_hash == duck.content_hash and on_ray.num_rows == duck.num_rows > 0
    assert lake.object_problem(lake.connect(), on_ray.objects[0]) is None
    assert os.environ["AIFAB_STORAGE_URI"] == s3_storage
