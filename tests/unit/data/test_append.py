from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from aifab.core.errors import InvalidInputError
from aifab.core.workspace import get_workspace
from aifab.data import append_records, flush_appends, list_quarantine, query, resolve

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from nodes import run_nodes  # noqa: E402


def test_micro_batches_seal_versions_and_keep_every_row() -> None:
    r1 = append_records("ev", [{"dev": "a", "t": 1.0}, {"dev": "b", "t": 2.0}], batch_rows=3)
    assert r1.version is None and r1.pending_rows == 2
    r2 = append_records("ev", [{"dev": "c", "t": 3.0}], batch_rows=3)
    assert r2.version is not None and r2.version.ref == "ev@1" and r2.pending_rows == 0
    r3 = append_records("ev", [{"dev": "d", "t": 4.0}], flush=True)
    v2 = r3.version
    assert v2 is not None and v2.ref == "ev@2" and v2.parents == ["ev@1"]
    assert v2.num_rows == 4 and len(v2.objects) == 2
    assert query("SELECT dev FROM ev ORDER BY t").column("dev").to_pylist() == list("abcd")
    assert resolve("ev@1").num_rows == 3


def test_records_that_do_not_fit_are_quarantined() -> None:
    append_records("ev", [{"dev": "a", "t": 1.0}], flush=True)
    r = append_records(
        "ev",
        [{"dev": "x", "t": "hot"}, {"dev": "y", "t": 2.0, "extra": 1}, {"dev": "z", "t": 3}],
        flush=True,
    )
    assert (r.accepted, r.quarantined) == (1, 2)
    q = list_quarantine("ev", stage="append")
    assert sorted(item["record"]["dev"] for item in q) == ["x", "y"]
    assert any("unknown fields ['extra']" in item["reason"] for item in q)
    with pytest.raises(InvalidInputError, match="record 0: expected an object"):
        append_records("ev", ["nope"])  # type: ignore[list-item]


def test_claim_left_by_a_dead_process_is_recovered() -> None:
    append_records("ev", [{"dev": "a", "t": 1.0}, {"dev": "b", "t": 2.0}], batch_rows=100)
    pending = get_workspace().lake / "pending" / "ev"
    dead_pid = 2**22 + 12345  # above pid_max defaults: no such process
    claim = pending / f"claim-{dead_pid}-dead"
    claim.mkdir()
    for f in pending.glob("*.parquet"):
        os.replace(f, claim / f.name)
    v = flush_appends("ev")
    assert v is not None and v.num_rows == 2
    assert not claim.exists()


def test_cli_append_jsonl(cli, tmp_path: Path) -> None:
    f = tmp_path / "e.jsonl"
    f.write_text('{"dev": "a", "t": 1}\n{"dev": "b", "t": 2}\n')
    r = cli("data", "append", "ev", f, "--flush", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["version"] == "ev@1"
    f.write_text('{"dev": "a"\n')
    r = cli("data", "append", "ev", f)
    assert r.exit_code == 2 and "e.jsonl:1: invalid JSON" in r.stderr


_PUSHER = """
import sys, time
from aifab.data import append_records
node, n = sys.argv[1], int(sys.argv[3])
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
for i in range(n):
    append_records("pushed", [{"node": node, "i": i}], batch_rows=2)
"""


def test_two_processes_sealing_at_once_lose_no_row(workspace: Path, tmp_path: Path) -> None:
    # A seal that read the latest version before another seal committed must not build on it.
    append_records("pushed", [{"node": "-", "i": -1}], flush=True)
    n = 12
    run_nodes(_PUSHER, tmp_path, str(n), home=workspace)
    flush_appends("pushed")
    rows = query("SELECT node, i FROM pushed WHERE i >= 0 ORDER BY node, i").to_pylist()
    assert rows == [{"node": node, "i": i} for node in "ab" for i in range(n)]
