"""Identifiers and content digests."""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
from typing import Any


def new_id(prefix: str) -> str:
    """Return a sortable unique id such as ``job_0192f1c3a4b5_9f8e7d6c``.

    The random part comes from ``random`` (seeded from the OS, reseeded in forked children):
    ids need uniqueness, not secrecy, and ``os.urandom`` is a system call that lets go of the
    GIL on every request of the serving hot path.
    """
    return f"{prefix}_{time.time_ns() // 1_000_000:012x}_{random.getrandbits(32):08x}"


def canonical_json(obj: Any) -> str:
    """Serialize ``obj`` deterministically (sorted keys, no spaces, str() for odd types)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def digest(obj: Any) -> str:
    """SHA-256 hex digest of ``obj``'s canonical JSON."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def file_digest(path: os.PathLike[str] | str, chunk: int = 1 << 20) -> str:
    """SHA-256 hex digest of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
