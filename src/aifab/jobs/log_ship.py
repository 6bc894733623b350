"""Replica logs on the object store: shipped in numbered chunks while a replica runs.

A replica on another node writes its log to its own disk, which the head cannot read. With
``AIFAB_STORAGE_URI`` set a :class:`LogShipper` copies what was appended since the last chunk to
a new write-once object ``<log key>.<seq>`` (``logs/jobs/<id>/attempt-N/replica-R.log.000001``,
...) every few seconds or every :data:`CHUNK_BYTES`, and the rest when the replica ends, before
its exit is reported, so a log is complete on the store by the time its job is final. Object
stores have no append, hence chunks; :func:`read_stored` reads their concatenation by byte
offset, as :func:`aifab.jobs.logs.tail_log` reads a file. Plain Python (no Ray): the Ray
executor's replica actor uses it too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from aifab.core.storage import Store

log = logging.getLogger("aifab.jobs.log_ship")

__all__ = ["CHUNK_BYTES", "EVERY_S", "LogShipper", "read_stored", "shipped_output", "stored_size"]

#: Ship a chunk once this many bytes are new...
CHUNK_BYTES = 256 * 1024
#: ...or once new bytes have waited this long.
EVERY_S = 2.0
_TICK_S = 0.25
#: The largest chunk (a log that grew faster than the ticks is shipped in pieces this big).
_MAX_CHUNK = 8 << 20


def _chunk_key(key: str, seq: int) -> str:
    return f"{key}.{seq:06d}"


class LogShipper:
    """Copies the growing file ``path`` to chunk objects ``<key>.<seq>`` on ``store``.

    Args:
        path: the log file (written by the replica's process, appended only).
        key: the log's key on the store (its path relative to the workspace).
        store: an object store.
        every_s: the longest new bytes wait before they are shipped.
        chunk_bytes: ship at once when this many bytes are new.
    """

    def __init__(
        self,
        path: Path,
        key: str,
        store: Store,
        *,
        every_s: float = EVERY_S,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self.path, self.key, self.store = path, key, store
        self.every_s, self.chunk_bytes = every_s, chunk_bytes
        shipped = _chunks(store, key)  # a restarted shipper continues after what is there
        self._seq, self._shipped = len(shipped), sum(size for _, size in shipped)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ship-{key}", daemon=True)

    def start(self) -> LogShipper:
        """Start shipping in a background thread; returns self."""
        self._thread.start()
        return self

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(_TICK_S):
            try:
                new = self.path.stat().st_size - self._shipped
            except FileNotFoundError:
                continue
            if new >= self.chunk_bytes or (new > 0 and time.monotonic() - last >= self.every_s):
                try:
                    self.ship()
                except Exception as exc:  # noqa: BLE001 - the store failed: retry at the next tick
                    log.warning("shipping %s failed: %s", self.key, exc)
                last = time.monotonic()

    def ship(self) -> None:
        """Store what was appended since the last chunk as the next chunk(s) (nothing if none)."""
        with self._lock:
            try:
                fh = self.path.open("rb")
            except FileNotFoundError:
                return
            with fh:
                fh.seek(self._shipped)
                while data := fh.read(_MAX_CHUNK):  # a burst goes out in bounded pieces
                    self.store.write_bytes(_chunk_key(self.key, self._seq + 1), data, once=True)
                    self._seq += 1
                    self._shipped += len(data)

    def close(self) -> None:
        """Stop the thread and ship the rest (call once the replica's process has exited)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.ship()


def _chunks(store: Store, key: str) -> list[tuple[str, int]]:
    """``(path, size)`` of each chunk of ``key``, in order."""
    folder, _, name = key.rpartition("/")
    try:
        entries = store.fs.ls(store.path(folder), detail=True)
    except FileNotFoundError:
        return []
    out = []
    for e in entries:
        base = str(e["name"]).rsplit("/", 1)[-1]
        seq = base[len(name) + 1 :]
        if base.startswith(f"{name}.") and seq.isdigit():
            out.append((int(seq), str(e["name"]), int(e["size"])))
    return [(path, size) for _, path, size in sorted(out)]


def stored_size(store: Store, key: str) -> int:
    """Bytes of the log ``key`` shipped so far."""
    return sum(size for _, size in _chunks(store, key))


def read_stored(store: Store, key: str, offset: int, max_bytes: int) -> tuple[bytes, bool]:
    """Bytes of the shipped log ``key`` from ``offset`` (at most ``max_bytes``).

    Returns:
        The bytes, and whether the end of what was shipped so far was reached.
    """
    out, start, want = bytearray(), 0, max_bytes + 1
    for path, size in _chunks(store, key):
        end = start + size
        if end > offset and len(out) < want:
            lo = max(0, offset - start)
            hi = min(size, lo + want - len(out))
            out += store.fs.cat_file(path, start=lo, end=hi)
        start = end
    return bytes(out[:max_bytes]), len(out) <= max_bytes


@contextlib.contextmanager
def shipped_output(key: str, path: Path, store: Store) -> Iterator[None]:
    """Copy this process's stdout and stderr (and its children's) to ``path`` and the store.

    For a replica whose output only its container runtime keeps (a Volcano pod): what it
    prints still reaches the original stdout (stderr merged into it, as ``kubectl logs`` shows
    them) and also the file ``path``, which a :class:`LogShipper` ships to ``key``. Everything
    is shipped when the block ends.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)
    copier = threading.Thread(target=_copy, args=(read_end, saved[0], path), daemon=True)
    copier.start()
    shipper = LogShipper(path, key, store).start()
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)  # closes the pipe's last write ends this process holds
        os.dup2(saved[1], 2)
        copier.join(timeout=10)  # a child still holding the pipe must not hang the exit
        shipper.close()
        os.close(saved[0])
        os.close(saved[1])


def _copy(read_end: int, out: int, path: Path) -> None:
    with path.open("ab") as log_file:
        while data := os.read(read_end, 1 << 16):
            os.write(out, data)
            log_file.write(data)
            log_file.flush()
    os.close(read_end)
