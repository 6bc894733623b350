"""No team-wide lock: an open transaction in one process holds up no other process's unrelated
reads or writes, on SQLite (readers only: one SQLite file has one writer at a time) and on
PostgreSQL (readers and writers of other aggregates).

The other process must finish its whole mix while this one still holds its transaction open:
the check is the order of the two, not a duration.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError

from aifab.core.db import lock_aggregate, session_scope
from aifab.jobs import service
from aifab.jobs.tables import JobRow
from aifab.serve.keys import create_key

#: Reads and writes of another process that have nothing to do with what the holder touches.
_OTHER = textwrap.dedent(
    """
    import sys
    from aifab.data.catalog import list_datasets
    from aifab.jobs import scheduler, service
    from aifab.jobs.resources import Resources
    from aifab.serve.keys import authenticate
    from aifab.serve.limits import TokenQuota

    held_job, other_job, secret = sys.argv[1:4]
    assert authenticate(secret) is not None            # the gateway's key lookup
    assert service.get_job(held_job)["id"] == held_job  # a row the holder writes: read anyway
    service.list_jobs()                                 # a dashboard list
    list_datasets()
    worker = scheduler.register_worker("local", Resources(1, 64, 0))
    scheduler.heartbeat(worker, 30.0)                   # a worker's heartbeat
    service.cancel(other_job)                           # another job's state change (audited)
    quota = TokenQuota()
    quota.add("key_other", 5, requests=1)
    quota.flush()                                       # the gateway's token counter
    print("done")
    """
)

#: How long the other process may take at most before the test gives up (a deadlock guard for a
#: loaded machine, not a measure: it finishes in about a second where nothing blocks it).
_GIVE_UP_S = 120


def _run_other(held_job: str, other_job: str, secret: str) -> None:
    """Run :data:`_OTHER` to its end; fail if it cannot finish while the caller holds on."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _OTHER, held_job, other_job, secret],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = proc.communicate(timeout=_GIVE_UP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the other process was still waiting when the holder would have let go")
    assert proc.returncode == 0, err.decode()[-3000:]
    assert out.decode().split() == ["done"]


def _jobs() -> tuple[str, str, str]:
    spec = {"run": {"command": ["true"]}, "resources": {"cpu": 0.1, "memory": 16}}
    held = service.submit({**spec, "name": "held"})["id"]
    other = service.submit({**spec, "name": "other"})["id"]
    _, secret = create_key("client", name="reader")
    return held, other, secret


def test_open_read_transaction_holds_up_no_other_process(db_url: str) -> None:
    held, other, secret = _jobs()
    with session_scope(readonly=True) as s:
        assert s.get(JobRow, held) is not None  # the transaction has begun and read
        _run_other(held, other, secret)
        # Still the same transaction: it reads its snapshot on, unaffected.
        assert list(s.scalars(select(JobRow.id).order_by(JobRow.id)))
    assert service.get_job(other)["state"] == "cancelled"


def test_open_write_transaction_holds_up_no_unrelated_process(db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite has one writer per file: a writer open holds other writers back")
    held, other, secret = _jobs()
    with session_scope() as s:
        lock_aggregate(s, "dataset", "held-by-test")
        row = s.get(JobRow, held, with_for_update=True)
        assert row is not None
        row.reason = "held by the test"
        s.flush()
        _run_other(held, other, secret)
    assert service.get_job(held)["reason"] == "held by the test"
    assert service.get_job(other)["state"] == "cancelled"


def test_read_only_session_refuses_a_write_on_postgresql(db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite's deferred transactions are not marked read-only")
    held, _, _ = _jobs()
    with (
        pytest.raises(DBAPIError, match="read-only transaction"),
        session_scope(readonly=True) as s,
    ):
        row = s.get(JobRow, held)
        assert row is not None
        row.reason = "written by mistake"
    assert service.get_job(held)["reason"] != "written by mistake"
