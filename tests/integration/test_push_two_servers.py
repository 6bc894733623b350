"""Two ``aifab serve`` processes standing for two machines (their own empty AIFAB_HOME each; one
metadata DB; one object store, moto's S3 server as the named stand-in for S3/MinIO) take pushed
records for one dataset: each counts the other's pending rows, and a flush through either seals
all of them into one version."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from tests import live_http

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serve_proc import aifab_serve  # noqa: E402

pytestmark = pytest.mark.integration


def test_records_pushed_to_two_servers_are_pending_on_both_and_sealed_once(
    s3_storage: str, workspace: Path, tmp_path: Path
) -> None:
    from aifab.data import query
    from aifab.data.catalog import resolve
    from aifab.serve.keys import create_key

    _, secret = create_key("developer", name="pusher", rate=None)
    headers = {"Authorization": f"Bearer {secret}"}
    db = {"AIFAB_DB_URL": f"sqlite:///{workspace / 'aifab.db'}"}
    envs = [{**os.environ, **db, "AIFAB_HOME": str(tmp_path / n)} for n in ("node-a", "node-b")]
    for env in envs:
        Path(env["AIFAB_HOME"]).mkdir()
    with (
        aifab_serve(envs[0], Path(envs[0]["AIFAB_HOME"]), "--no-worker") as a,
        aifab_serve(envs[1], Path(envs[1]["AIFAB_HOME"]), "--no-worker") as b,
    ):
        route = "/v1/datasets/sensor_events/records"
        r = live_http.post(a + route, json={"records": [{"dev": "a", "t": 1}]}, headers=headers)
        assert r.status_code == 200 and r.json()["pending_rows"] == 1, r.text
        r = live_http.post(b + route, json={"records": [{"dev": "b", "t": 2}]}, headers=headers)
        assert r.status_code == 200 and r.json()["pending_rows"] == 2, r.text
        last = {"records": [{"dev": "c", "t": 3}], "flush": True}
        r = live_http.post(a + route, json=last, headers=headers)
        # 202: the seal outlasted the route's wait (a loaded machine) and goes on; it lands
        # while the server runs.
        assert r.status_code in (200, 202), r.text
        if r.status_code == 202:
            assert r.json()["sealing"] is True
            _wait_for_version("sensor_events")
        else:
            assert r.json()["version"] == "sensor_events@1", r.text
    assert resolve("sensor_events").ref == "sensor_events@1"  # sealed once
    rows = query("SELECT dev FROM sensor_events ORDER BY t").to_pylist()
    assert rows == [{"dev": "a"}, {"dev": "b"}, {"dev": "c"}]


def _wait_for_version(name: str, timeout_s: float = 120.0) -> None:
    from aifab.core.errors import NotFoundError
    from aifab.data.catalog import resolve

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            resolve(name)
            return
        except NotFoundError:
            assert time.monotonic() < deadline, f"no version of {name} was sealed"
            time.sleep(0.2)
