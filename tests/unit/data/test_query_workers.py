"""``aifab.data.query`` in the worker pool: one DuckDB call that ignores the interrupt is
killed with its worker, and the next query runs (issue 31, item 3)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aifab.core import workers
from aifab.core.errors import InvalidInputError
from aifab.data import ingest, query


@pytest.fixture()
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AIFAB_WORKER_PROCESSES", "1")
    workers.start(preload=("aifab.data.browse",))
    yield
    workers.stop()


def test_a_repeat_that_ignores_the_interrupt_is_killed(
    pool: None, workspace: Path, tmp_path: Path
) -> None:
    path = tmp_path / "t.csv"
    path.write_text("a\n1\n2\n")
    ingest("t", str(path))
    # DuckDB builds the 400 MB string in one call: its interrupt lands only afterwards.
    with pytest.raises(InvalidInputError, match="stopped at its time limit.*worker was killed"):
        query("SELECT max(length(repeat('ab', 200000000))) AS n", timeout_s=0.2)
    assert query("SELECT sum(a) AS s FROM t", timeout_s=30).to_pylist() == [{"s": 3}]
