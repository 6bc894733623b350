"""A KB version's files under ``indexes/<kb>/v<N>/`` and loading them back (cached).

Files: ``chunks.parquet`` (row i = chunk i), ``vectors.npy``, ``dense.faiss``, ``bm25/`` and
``manifest.json`` (config and lineage). A version is built in a hidden temp folder and renamed
into place, so readers never see half a version.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from aifab.core.atomic import atomic_write_text
from aifab.core.errors import IntegrityError
from aifab.core.storage import get_store, local_dir, mirror_dir
from aifab.core.workspace import get_workspace
from aifab.rag.chunking import Chunk
from aifab.rag.index import FaissIndex
from aifab.rag.keyword import KeywordIndex

__all__ = ["KBFiles", "load_version", "publish", "staging_dir", "write_version"]


@dataclass
class KBFiles:
    """A loaded KB version: chunk table, vectors and both indexes."""

    kb: str
    version: int
    chunks: list[dict[str, Any]]
    vectors: np.ndarray
    dense: FaissIndex
    keyword: KeywordIndex
    manifest: dict[str, Any]

    def chunk(self, row: int) -> Chunk:
        """Chunk at ``row``."""
        c = self.chunks[row]
        return Chunk(
            id=c["id"],
            document=c["document"],
            position=c["position"],
            text=c["text"],
            heading=c["heading"],
            tokens=c["tokens"],
            metadata=json.loads(c["metadata"]),
            image=c.get("image"),
        )


def kb_root(kb: str) -> Path:
    """``indexes/<kb>`` of the workspace."""
    return get_workspace().indexes / kb


def staging_dir(kb: str) -> Path:
    """A fresh hidden folder to build a version in."""
    path = kb_root(kb) / f".build-{uuid.uuid4().hex[:12]}"
    path.mkdir(parents=True)
    return path


def write_version(
    directory: Path,
    chunks: list[Chunk],
    vectors: np.ndarray,
    dense: FaissIndex,
    keyword: KeywordIndex,
    manifest: dict[str, Any],
) -> None:
    """Write every file of a version into ``directory`` (manifest last)."""
    table = pa.table(
        {
            "id": [c.id for c in chunks],
            "document": [c.document for c in chunks],
            "position": pa.array([c.position for c in chunks], pa.int32()),
            "heading": [c.heading for c in chunks],
            "text": [c.text for c in chunks],
            "tokens": pa.array([c.tokens for c in chunks], pa.int32()),
            "metadata": [json.dumps(c.metadata, sort_keys=True, default=str) for c in chunks],
            # Image documents' thumbnails (null for text); versions before it lack the column.
            "image": pa.array([c.image for c in chunks], pa.binary()),
        }
    )
    pq.write_table(table, directory / "chunks.parquet")
    np.save(directory / "vectors.npy", np.ascontiguousarray(vectors, dtype="float32"))
    dense.save(directory / "dense.faiss")
    keyword.save(directory / "bm25")
    atomic_write_text(directory / "manifest.json", json.dumps(manifest, indent=2, default=str))


def publish(staged: Path, kb: str, version: int) -> Path:
    """Rename a built folder to ``v<version>`` (one atomic rename)."""
    final = kb_root(kb) / f"v{version}"
    if final.exists():  # a crashed earlier attempt at this number left it unrecorded
        shutil.rmtree(final)
    os.replace(staged, final)
    mirror_dir(_key(kb, version))  # other machines fetch it with local_dir
    return final


def _key(kb: str, version: int) -> str:
    return f"indexes/{kb}/v{version}"


_CACHE: dict[str, KBFiles] = {}
_LOCK = threading.Lock()


def load_version(
    kb: str, version: int, directory: str | Path, ef_search: int = 96, created_at: float = 0.0
) -> KBFiles:
    """Load (once per process) the files of a version.

    The cache key holds the version's creation time: a KB deleted and built again under the
    same name reuses the folder name, never the cached files.

    Raises:
        IntegrityError: files missing or unreadable (the message names the folder).
    """
    key = f"{directory}@{created_at!r}"
    with _LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    path = Path(directory)
    if not path.is_dir() and not get_store().is_local:
        try:  # built on another machine: its directory is there, ours comes from the store
            path = local_dir(_key(kb, version))
        except FileNotFoundError as exc:
            raise IntegrityError(f"knowledge base {kb}@{version}: {exc}") from None
    try:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
        chunks = pq.read_table(path / "chunks.parquet").to_pylist()
        vectors = np.load(path / "vectors.npy", mmap_mode="r")
        dense = FaissIndex.load(path / "dense.faiss", manifest["dense_kind"], ef_search)
        keyword = KeywordIndex.load(path / "bm25")
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise IntegrityError(
            f"knowledge base {kb}@{version}: index files at {path}: {exc}"
        ) from None
    files = KBFiles(kb, version, chunks, vectors, dense, keyword, manifest)
    with _LOCK:
        _CACHE[key] = files
    return files
