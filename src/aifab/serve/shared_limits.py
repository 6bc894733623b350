"""Rate-limit buckets shared by the server processes of one ``aifab serve --workers N`` run.

The buckets live in a small memory-mapped file of the run's directory; each check takes an
exclusive ``flock`` on it for a few microseconds, so every process sees and takes the same
tokens. The clock is ``CLOCK_MONOTONIC``, which all processes of one machine share.
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

from aifab.serve.limits import capacity

__all__ = ["SharedRateLimiter"]

#: One slot: 16-byte digest of the key id, tokens, last refill (monotonic seconds).
_SLOT = struct.Struct("<16sdd")
SLOTS = 4096


class SharedRateLimiter:
    """Token buckets per key in a file shared across processes.

    The same contract as :class:`~aifab.serve.limits.RateLimiter`.

    Args:
        path: the bucket file (created, zero-filled, when missing).
        clock: monotonic seconds, the same in every process.
        slots: keys the file holds (every process of a run must use the same number).
    """

    def __init__(
        self, path: Path, clock: Callable[[], float] = time.monotonic, slots: int = SLOTS
    ) -> None:
        self.path = Path(path)
        self._clock = clock
        self.slots = slots
        size = _SLOT.size * slots
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            fcntl.flock(fd, fcntl.LOCK_UN)
            self._map = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _slot(self, digest: bytes, now: float) -> int:
        """The slot holding ``digest``, or a free one, or (table full) the least recent."""
        start = int.from_bytes(digest[:4], "little") % self.slots
        oldest, oldest_at = start, float("inf")
        for probe in range(self.slots):
            i = (start + probe) % self.slots
            key, _, last = _SLOT.unpack_from(self._map, i * _SLOT.size)
            if key == digest or key == b"\0" * 16:
                return i
            if last < oldest_at:
                oldest, oldest_at = i, last
        return oldest  # a key idle longest gives up its bucket (it refills to full anyway)

    def check(self, key_id: str, rate_per_min: float | None) -> float | None:
        """Take one token from the key's bucket.

        Returns:
            None when allowed (no limit also allows), else the seconds until a token is there.
        """
        if rate_per_min is None:
            return None
        per_s = rate_per_min / 60.0
        full = capacity(rate_per_min)
        digest = hashlib.blake2b(key_id.encode(), digest_size=16).digest()
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            now = self._clock()
            i = self._slot(digest, now)
            key, tokens, last = _SLOT.unpack_from(self._map, i * _SLOT.size)
            if key != digest:
                tokens, last = full, now
            tokens = min(full, tokens + max(0.0, now - last) * per_s)
            allowed = tokens >= 1.0
            if allowed:
                tokens -= 1.0
            _SLOT.pack_into(self._map, i * _SLOT.size, digest, tokens, now)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        return None if allowed else (1.0 - tokens) / per_s

    def remaining(self, key_id: str, rate_per_min: float) -> tuple[int, float]:
        """Read-only: whole requests left in the key's bucket now, and seconds until it is full.

        The same answer :class:`~aifab.serve.limits.RateLimiter.remaining` gives, from the
        shared file (the ``x-ratelimit-*`` headers of every worker agree).
        """
        per_s = rate_per_min / 60.0
        full = capacity(rate_per_min)
        digest = hashlib.blake2b(key_id.encode(), digest_size=16).digest()
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        try:
            now = self._clock()
            key, tokens, last = _SLOT.unpack_from(self._map, self._slot(digest, now) * _SLOT.size)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        if key != digest:
            tokens, last = full, now
        tokens = min(full, tokens + max(0.0, now - last) * per_s)
        return int(tokens), (full - tokens) / per_s

    def close(self) -> None:
        """Unmap and close the file."""
        self._map.close()
        os.close(self._fd)
