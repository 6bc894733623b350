"""The trace writer: steps commit in batches, on flush or after a short delay, never lost."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.orm import Session

from aifab.agents.tables import AgentStepRow
from aifab.agents.trace_writer import TraceWriter
from aifab.core.db import session_scope


def _row(run_id: str, idx: int, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "idx": idx,
        "kind": "tool",
        "name": "sql",
        "input": {"query": "SELECT 1"},
        "output": {"rows": [{"x": idx}]},
        "latency_ms": 0.1,
        "ts": time.time(),
        **extra,
    }


def _put(writer: TraceWriter, row: dict[str, Any]) -> int:
    return writer.apply(lambda s: s.add(AgentStepRow(**row)))


def _count(run_id: str) -> int:
    with session_scope() as s:
        return int(s.scalar(select(func.count()).where(AgentStepRow.run_id == run_id)) or 0)


@pytest.fixture
def commits() -> Iterator[list[int]]:
    """Counts committed transactions, to see how the writer batches."""
    seen: list[int] = []

    def on_commit(session: Session) -> None:
        seen.append(1)

    event.listen(Session, "after_commit", on_commit)
    yield seen
    event.remove(Session, "after_commit", on_commit)


def test_a_short_run_costs_one_commit_at_its_flush(commits: list[int]) -> None:
    writer = TraceWriter(max_delay_s=60)
    _count("warm")  # the schema is made before counting
    commits.clear()
    for idx in range(9):
        _put(writer, _row("r1", idx))
    time.sleep(0.2)
    assert commits == [] and _count("r1") == 0  # nothing asked for it yet, nothing is due
    commits.clear()
    assert writer.flush(timeout_s=30)
    assert len(commits) == 1
    assert _count("r1") == 9


def test_queued_steps_commit_by_themselves_after_the_delay() -> None:
    # A run cut short (nobody flushes) still leaves its trace.
    writer = TraceWriter(max_delay_s=0.05)
    _put(writer, _row("r2", 0))
    deadline = time.monotonic() + 30
    while _count("r2") == 0:
        assert time.monotonic() < deadline, "the step was never written"
        time.sleep(0.02)


def test_a_bad_write_loses_none_of_the_others() -> None:
    writer = TraceWriter(max_delay_s=60)
    good = [_put(writer, _row("r3", idx)) for idx in range(3)]
    bad = _put(writer, _row("r3", 1))  # the same primary key twice
    last = _put(writer, _row("r3", 3))
    assert writer.flush(timeout_s=30)
    assert _count("r3") == 4
    assert writer.failed(bad)
    assert not any(writer.failed(t) for t in [*good, last])


def test_a_write_goes_to_the_workspace_it_was_queued_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = TraceWriter(max_delay_s=60)
    _put(writer, _row("r4", 0))
    with monkeypatch.context() as mp:
        mp.setenv("AIFAB_DB_URL", f"sqlite:///{tmp_path / 'other.db'}")
        assert writer.flush(timeout_s=30)
        assert _count("r4") == 0  # not in the workspace switched to
    assert _count("r4") == 1


def test_a_process_that_exits_commits_what_is_queued(workspace: Path) -> None:
    # A server stopped mid-run exits normally: its queued steps must not die with it.
    script = (
        "from aifab.agents.tables import AgentStepRow\n"
        "from aifab.agents.trace_writer import trace_writer\n"
        "w = trace_writer()\n"
        "w.max_delay_s = 3600\n"
        f"w.apply(lambda s: s.add(AgentStepRow(**{_row('r5', 0)!r})))\n"
    )
    _count("r5")  # the schema exists before the child writes
    done = subprocess.run(
        [sys.executable, "-c", script], env=os.environ.copy(), timeout=120, capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert _count("r5") == 1
