"""Following a job's log (``tail_log``), queues' use against share and capability, the timeline
of attempts and paging through jobs, against real workers and the local executor.

The machine is the 4-CPU, 8 GiB, GPU-less one of the ``machine`` fixture (conftest).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.jobs import (
    LogCursor,
    attempt_timeline,
    create_queue,
    get_job,
    list_jobs,
    log_path,
    queue_usage,
    retry,
    scheduler,
    submit,
    tail_log,
)
from aifab.jobs.policy import Node
from aifab.jobs.resources import Resources

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux processes")

Drive = Callable[..., None]
FINAL = ("succeeded", "failed", "cancelled")


def py(code: str, **spec: Any) -> dict[str, Any]:
    run = {"command": [sys.executable, "-c", code]}
    return submit({"name": "t", "run": run, "resources": {"cpu": 1, "memory": "64Mi"}, **spec})


def final(job_id: str) -> bool:
    return get_job(job_id)["state"] in FINAL


def follow(worker: Any, job_id: str, timeout: float = 30.0) -> list[str]:
    """Step the worker and collect ``tail_log`` chunks until it says the log is complete."""
    chunks: list[str] = []
    cursor = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        worker.step()
        tail = tail_log(job_id, cursor)
        if tail.text:
            chunks.append(tail.text)
        cursor = tail.cursor
        if tail.final:
            return chunks
        time.sleep(0.02)
    raise AssertionError(f"log of {job_id} not complete within {timeout} s")


def test_following_a_running_job_loses_and_repeats_nothing_and_holds_partial_lines(
    make_worker: Callable[..., Any],
) -> None:
    code = (
        "import sys, time\n"
        "for i in range(12):\n"
        "    print(f'line {i} <b>&', flush=True); time.sleep(0.05)\n"
        "sys.stdout.write('par'); sys.stdout.flush(); time.sleep(0.4)\n"
        "print('tial\\r\\nstill'); sys.stdout.write('no newline at the end')\n"
    )
    job = py(code)
    chunks = follow(make_worker(), job["id"])
    expected = "".join(f"line {i} <b>&\n" for i in range(12))
    expected += "partial\r\nstill\nno newline at the end"
    assert "".join(chunks) == expected
    assert len(chunks) > 1  # it came while the job ran, not in one piece at the end
    assert all(c.endswith("\n") for c in chunks[:-1])  # no line cut while it was written


def test_a_retried_job_continues_with_the_next_attempt(
    make_worker: Callable[..., Any], drive_until: Drive
) -> None:
    job = py("import os, sys; print('attempt', os.environ['AIFAB_JOB_ATTEMPT']); sys.exit(3)")
    worker = make_worker()
    drive_until(worker, lambda: final(job["id"]))
    first = tail_log(job["id"])
    assert first.text == "attempt 1\n" and first.final and first.state == "failed"
    retry(job["id"])
    pending = tail_log(job["id"], first.cursor)
    assert pending.text == "" and not pending.final and pending.state == "pending"
    drive_until(worker, lambda: final(job["id"]))
    rest = ""
    cursor = first.cursor
    for _ in range(5):
        tail = tail_log(job["id"], cursor)
        rest, cursor = rest + tail.text, tail.cursor
        if tail.final:
            break
    assert rest == "--- attempt 2 ---\nattempt 2\n" and tail.final
    assert cursor == LogCursor(2, len("attempt 2\n"))


def test_a_long_log_starts_at_a_whole_line_near_its_end(
    make_worker: Callable[..., Any], drive_until: Drive
) -> None:
    job = py("for i in range(2000): print(f'row {i:05d}')")
    drive_until(make_worker(), lambda: final(job["id"]))
    tail = tail_log(job["id"], start_bytes=100)
    assert tail.skipped > 0 and tail.text.startswith("row ") and tail.final
    assert tail.text.endswith("row 01999\n") and len(tail.text) <= 100
    size = log_path(job["id"], 1).stat().st_size
    assert tail.skipped + len(tail.text) == size
    chunk = tail_log(job["id"], LogCursor(1, 0), max_bytes=25)
    assert chunk.text == "row 00000\nrow 00001\n" and not chunk.final  # whole lines only


def test_tail_log_refuses_unknown_jobs_and_replicas() -> None:
    with pytest.raises(NotFoundError, match="job 'job_nope' not found"):
        tail_log("job_nope")
    job = py("print(1)", replicas=2)
    assert tail_log(job["id"], replica=1).text == ""  # pending: nothing yet, not final
    with pytest.raises(InvalidInputError, match=r"replica 2: .* ranks 0\.\.1"):
        tail_log(job["id"], replica=2)


@pytest.mark.parametrize("text", [None, "", "x", "1:", ":2", "1:-2", "a:b", "1:2:3", "²:1", "1:³"])
def test_unreadable_cursors_are_none(text: str | None) -> None:
    assert LogCursor.parse(text) is None


def test_a_cursor_reads_back_from_its_text() -> None:
    assert LogCursor.parse(str(LogCursor(3, 1234))) == LogCursor(3, 1234)


def _start(worker_id: str) -> None:
    scheduler.plan(worker_id, "local", [Node("local", Resources(4, 4096, 0))], lease_s=30)


def test_queue_usage_shows_use_against_share_and_capability() -> None:
    create_queue("gold", weight=3, cpu=2)
    empty = {q["name"]: q for q in queue_usage()["queues"]}
    assert empty["gold"]["deserved"] is None  # no live worker: nothing to share
    assert empty["gold"]["weight_share"] == pytest.approx(0.75)
    assert empty["default"]["quota_use"] is None  # unlimited
    assert empty["gold"]["quota_use"] == 0.0
    for name in ("a", "b"):
        py("print(1)", name=name, queue="gold", resources={"cpu": 1, "memory": "64Mi"})
    py("print(1)", name="c", queue="default", resources={"cpu": 1, "memory": "64Mi"})
    wid = scheduler.register_worker("local", Resources(4, 4096, 0))
    _start(wid)
    usage = queue_usage()
    assert usage["workers"] == 1 and usage["capacity"]["cpu"] == 4
    gold = {q["name"]: q for q in usage["queues"]}["gold"]
    assert gold["running"] == 2 and gold["pending"] == 0
    assert gold["used"] == {"cpu": 2.0, "memory_mb": 128.0, "gpu": 0}
    assert gold["quota_use"] == pytest.approx(1.0)  # 2 of its 2 CPUs
    assert gold["used_share"] == pytest.approx(0.5)
    assert gold["deserved"]["cpu"] == pytest.approx(2.0)  # capped by its capability
    default = {q["name"]: q for q in usage["queues"]}["default"]
    assert default["used"]["cpu"] == 1.0 and default["deserved"]["cpu"] == pytest.approx(1.0)


def test_the_timeline_says_which_attempt_ran_where_newest_first() -> None:
    first = py("print(1)", name="first")
    wid = scheduler.register_worker("local", Resources(4, 4096, 0))
    _start(wid)
    second = py("print(2)", name="second")
    _start(wid)
    rows = attempt_timeline()
    assert [(r["job_name"], r["number"]) for r in rows] == [("second", 1), ("first", 1)]
    assert rows[0]["worker_id"] == wid and rows[0]["executor"] == "local"
    assert rows[0]["host"] and rows[0]["placement"] == ["local"]
    assert rows[0]["state"] == "running" and rows[0]["finished_at"] is None
    assert [r["job_id"] for r in attempt_timeline(job_id=first["id"])] == [first["id"]]
    assert [r["job_id"] for r in attempt_timeline(limit=1)] == [second["id"]]


def test_list_jobs_pages_with_an_offset() -> None:
    ids = [py("print(1)", name=f"j{i}")["id"] for i in range(7)]
    pages = [list_jobs(limit=3, offset=o) for o in (0, 3, 6, 9)]
    assert [len(p) for p in pages] == [3, 3, 1, 0]
    assert [j["id"] for p in pages for j in p] == ids[::-1]
    assert [j["id"] for j in list_jobs(state="pending", limit=2, offset=5)] == ids[1::-1]
