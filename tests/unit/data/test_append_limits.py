"""Bounded work per push (issue 9, fault 1): a column cap, and a failing pending batch is
retried a bounded number of times, then set aside with its reason."""

from __future__ import annotations

import json

import pytest

from aifab.core.errors import AifabError, InvalidInputError
from aifab.core.workspace import get_workspace
from aifab.data import append_records, flush_appends


def test_a_record_wider_than_the_cap_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIFAB_MAX_COLUMNS", "50")
    wide = {f"c{i}": i for i in range(51)}
    with pytest.raises(InvalidInputError, match=r"51 columns.*limit of 50.*AIFAB_MAX_COLUMNS"):
        append_records("wide", [wide], flush=True)
    # A schema change wider than the cap, spread over several records, is refused too.
    halves = [{f"a{i}": i for i in range(30)}, {f"b{i}": i for i in range(30)}]
    with pytest.raises(InvalidInputError, match=r"60 columns.*AIFAB_MAX_COLUMNS"):
        append_records("wide", halves)
    assert not (get_workspace().lake / "pending" / "wide").exists()
    ok = append_records("wide", [{f"c{i}": i for i in range(50)}], flush=True)
    assert ok.version is not None and ok.accepted == 1


def test_a_failing_pending_batch_is_set_aside_after_bounded_retries() -> None:
    append_records("ev", [{"dev": "a", "t": 1.0}], flush=True)
    pending = get_workspace().lake / "pending" / "ev"
    (pending / "batch_junk.parquet").write_bytes(b"PAR1 this is not parquet")
    failures = 0
    for _ in range(10):
        try:
            if flush_appends("ev") is None:
                break
        except AifabError:
            failures += 1
    assert failures == 3  # MAX_COMMIT_ATTEMPTS, then set aside: not retried forever
    assert not list(pending.glob("*.parquet"))
    failed = list((pending / "failed").glob("*.parquet"))
    assert [f.name for f in failed] == ["batch_junk.parquet"]
    reason = json.loads((pending / "failed" / "batch_junk.parquet.json").read_text())
    assert reason["attempts"] == 3 and reason["reason"]
    # The dataset takes new records again.
    r = append_records("ev", [{"dev": "b", "t": 2.0}], flush=True)
    assert r.version is not None and r.version.num_rows == 2


def test_a_wide_push_into_an_existing_dataset_is_converted_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 19 item 6: every record was converted alone against the schema (500 rows x 2,048
    columns took 25 s); a push that fits is converted in one go, misfits still quarantined."""
    import types

    import pyarrow as pa

    from aifab.data import append as append_module

    rows = [{f"c{j}": float(i + j) for j in range(300)} for i in range(200)]
    append_records("wide", rows[:1], flush=True)
    calls = []

    class CountedTable:  # a spy on Arrow's conversion (Arrow's types cannot be patched)
        @staticmethod
        def from_pylist(*args: object, **kwargs: object) -> pa.Table:
            calls.append(1)
            return pa.Table.from_pylist(*args, **kwargs)  # type: ignore[arg-type]

    class Arrow(types.ModuleType):
        Table = CountedTable

        def __getattr__(self, name: str) -> object:
            return getattr(pa, name)

    monkeypatch.setattr(append_module, "pa", Arrow("pyarrow"))
    landed = append_records("wide", rows, flush=False)
    assert landed.accepted == 200 and landed.quarantined == 0
    assert len(calls) <= 2
    # One misfit among them is still found and set aside by itself.
    bad = [*rows[:50], {**rows[0], "c7": "not a number"}, *rows[50:100]]
    landed = append_records("wide", bad, flush=True)
    assert landed.accepted == 100 and landed.quarantined == 1
    assert landed.version is not None
