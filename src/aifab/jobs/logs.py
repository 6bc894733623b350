"""Job logs: where a replica's log is, and reading what was appended since a cursor (follow).

A cursor is (attempt, byte offset). :func:`tail_log` returns the complete lines written since
it, moving on to the next attempt when a job is re-queued or retried, and says when the job is
final and its log fully read, so callers (``aifab job logs -f``, the dashboard's live log) stop.

A log this machine does not have (its replica ran on another node) is read from the object
store when one is set, where replicas ship their logs in chunks (:mod:`aifab.jobs.log_ship`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from aifab.core.db import session_scope
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.core.storage import Store, get_store
from aifab.core.workspace import get_workspace
from aifab.jobs.launch import attempt_dir
from aifab.jobs.log_ship import read_stored, stored_size
from aifab.jobs.tables import JobRow

__all__ = ["LogCursor", "LogTail", "follow_lines", "log_path", "read_log", "tail_log"]

log = logging.getLogger("aifab.jobs")

FINAL = ("succeeded", "failed", "cancelled")
#: The most bytes one call returns (a follower calls again for the rest).
MAX_CHUNK_BYTES = 64 * 1024
#: A follower starting with no cursor begins this far before the end of a long log.
START_TAIL_BYTES = 256 * 1024


@dataclass(frozen=True)
class LogCursor:
    """A position in a job's logs: byte ``offset`` into attempt ``attempt``'s log."""

    attempt: int = 0
    offset: int = 0

    def __str__(self) -> str:
        return f"{self.attempt}:{self.offset}"

    @classmethod
    def parse(cls, text: str | None) -> LogCursor | None:
        """A cursor from its ``str`` form (e.g. an SSE ``Last-Event-ID``); None if unreadable."""
        attempt, _, offset = (text or "").partition(":")
        # isascii too: str.isdigit also accepts digits int() refuses, such as "²".
        if not all(part.isascii() and part.isdigit() for part in (attempt, offset)):
            return None
        return cls(int(attempt), int(offset))


@dataclass(frozen=True)
class LogTail:
    """What :func:`tail_log` read: new ``text``, the cursor after it and the job's state.

    ``final`` is True once the job is final and its last attempt's log was read to the end;
    ``skipped`` counts the bytes of a long log's start left out when following began.
    """

    text: str
    cursor: LogCursor
    state: str
    final: bool
    skipped: int = 0


def log_path(job_id: str, attempt: int, replica: int = 0) -> Path:
    """The log file of one replica of one attempt (it may not exist yet)."""
    return attempt_dir(job_id, attempt) / f"replica-{replica}.log"


def _job_state(job_id: str, replica: int) -> tuple[str, int]:
    with session_scope(readonly=True) as s:
        row = s.execute(
            select(JobRow.state, JobRow.attempt, JobRow.spec).where(JobRow.id == job_id)
        ).first()
    if row is None:
        raise NotFoundError(f"job {job_id!r} not found (see 'aifab job list')")
    replicas = int(row.spec["replicas"])
    if not 0 <= replica < replicas:
        raise InvalidInputError(f"replica {replica}: job {job_id} has ranks 0..{replicas - 1}")
    return str(row.state), int(row.attempt)


@dataclass(frozen=True)
class _Stored:
    """A replica log shipped to the object store (read where the file is not on this disk)."""

    store: Store
    key: str


def _source(job_id: str, attempt: int, replica: int) -> Path | _Stored:
    """Where to read a replica's log: its file, or its chunks on the store if not on this disk."""
    path = log_path(job_id, attempt, replica)
    store = get_store()
    if store.is_local or path.exists():
        return path
    return _Stored(store, path.relative_to(get_workspace().root).as_posix())


def _read(path: Path | _Stored, offset: int, max_bytes: int) -> tuple[bytes, bool]:
    """Bytes from ``offset`` (at most ``max_bytes``) and whether the end of the file was hit."""
    if isinstance(path, _Stored):
        return read_stored(path.store, path.key, offset, max_bytes)
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        return b"", True
    return data[:max_bytes], len(data) <= max_bytes


def _whole_lines(data: bytes, at_end: bool, *, still_written: bool) -> tuple[bytes, bool]:
    """Cut ``data`` after its last newline when the file goes on past it.

    A full chunk, or a log still being written, may end mid-line: that part waits for the next
    call. A line longer than a chunk goes out a chunk at a time, so a follower never stalls.
    """
    cut = data.rfind(b"\n") + 1
    if cut == len(data) or (at_end and not still_written):
        return data, at_end
    if cut == 0:
        return (data, False) if not at_end else (b"", True)
    return data[:cut], False


def _size(path: Path | _Stored) -> int:
    if isinstance(path, _Stored):
        return stored_size(path.store, path.key)
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _start(path: Path | _Stored, start_bytes: int) -> int:
    """Where a new follower starts: the first whole line of the last ``start_bytes``."""
    size = _size(path)
    if size <= start_bytes:
        return 0
    data, _ = _read(path, size - start_bytes, start_bytes)
    cut = data.find(b"\n")
    return size - start_bytes + (cut + 1 if cut >= 0 else 0)


def read_log(job_id: str, attempt: int, replica: int = 0) -> Iterator[bytes] | None:
    """One replica's whole log, a chunk at a time, from this disk or the store; None if absent.

    A replica that ran on another node shipped its log to the object store, so a finished
    job's log reads the same from any machine that shares the store.
    """
    source = _source(job_id, attempt, replica)
    if _size(source) == 0 and not (isinstance(source, Path) and source.exists()):
        return None

    def chunks() -> Iterator[bytes]:
        offset, at_end = 0, False
        while not at_end:
            data, at_end = _read(source, offset, MAX_CHUNK_BYTES)
            offset += len(data)
            if data:
                yield data

    return chunks()


def tail_log(
    job_id: str,
    cursor: LogCursor | None = None,
    *,
    replica: int = 0,
    max_bytes: int = MAX_CHUNK_BYTES,
    start_bytes: int = START_TAIL_BYTES,
) -> LogTail:
    """The complete lines of ``replica``'s log written since ``cursor``.

    With no cursor it starts at the current attempt (within its last ``start_bytes``). A
    cursor on an earlier attempt reads that attempt to its end first, then the next one,
    each new attempt's text starting with a ``--- attempt N ---`` line. A partial last line is
    held back until its newline arrives, or the job is final.

    Raises:
        NotFoundError: no such job.
        InvalidInputError: ``replica`` is not one of the job's ranks.
    """
    state, current = _job_state(job_id, replica)  # the state BEFORE the file: nothing is missed
    final_state = state in FINAL
    if current == 0:
        return LogTail("", cursor or LogCursor(), state, final_state)
    skipped, header = 0, ""
    if cursor is None or cursor.attempt == 0 or cursor.attempt > current:
        offset = _start(_source(job_id, current, replica), start_bytes)
        cursor, skipped = LogCursor(current, offset), offset
    data, at_end = _read(_source(job_id, cursor.attempt, replica), cursor.offset, max_bytes)
    if not data and at_end and cursor.attempt < current:
        cursor = LogCursor(cursor.attempt + 1, 0)
        header = f"--- attempt {cursor.attempt} ---\n"
        data, at_end = _read(_source(job_id, cursor.attempt, replica), 0, max_bytes)
    last_attempt = cursor.attempt == current
    data, at_end = _whole_lines(data, at_end, still_written=last_attempt and not final_state)
    text = header + data.decode("utf-8", errors="replace")
    after = LogCursor(cursor.attempt, cursor.offset + len(data))
    done = final_state and last_attempt and at_end
    return LogTail(text, after, state, done, skipped)


def follow_lines(
    job_id: str, on_line: Callable[[str], None], stop: threading.Event, *, poll_s: float = 1.0
) -> threading.Thread:
    """Start a thread calling ``on_line`` with each new line of replica 0's log until ``stop``.

    A foreground wait (``aifab run``'s train step) relays the job's progress lines with it.
    """

    def run() -> None:
        cursor: LogCursor | None = None
        while True:
            stopping = stop.wait(poll_s)
            try:
                tail = tail_log(job_id, cursor)
            except Exception:  # noqa: BLE001 - relaying is a courtesy; the wait goes on
                log.debug("following the log of %s failed", job_id, exc_info=True)
                tail = None
            if tail is not None:
                cursor = tail.cursor
                for line in tail.text.splitlines():
                    on_line(line)
            if stopping or (tail is not None and tail.final):
                return

    thread = threading.Thread(target=run, name=f"aifab-follow-{job_id}", daemon=True)
    thread.start()
    return thread
