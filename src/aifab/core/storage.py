"""The one storage interface for every byte aifab keeps outside the metadata DB.

A :class:`Store` is an fsspec filesystem plus the root of the workspace on it, addressed by
*keys* relative to that root (``lake/objects/ab/ab12...parquet``, ``artifacts/...``). Unset
``AIFAB_STORAGE_URI`` means the local workspace directory (``AIFAB_HOME``), exactly as before;
``s3://bucket/prefix`` (also ``gs://``, ``az://``, ``memory://`` and any fsspec protocol) puts
the workspace's bytes on an object store. Credentials and endpoints come from the library's
usual chain (``AWS_*`` environment variables, profiles, instance roles; ``AWS_ENDPOINT_URL_S3``
for MinIO and other S3-compatible servers).

Object stores have no rename, so writers never rely on one: content-addressed objects are
written once (a conditional put where the store supports it, then a check of what is stored)
and become visible only when the metadata DB lists them; a single PUT is atomic, so a reader
never sees a half-written object.

Callers that want the library itself (Ray Data, pyarrow, DuckDB's ``register_filesystem``) use
:attr:`Store.fs` with :meth:`Store.path` or :meth:`Store.url`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aifab.core.atomic import atomic_path
from aifab.core.errors import InvalidInputError
from aifab.core.settings import Settings, get_settings

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

__all__ = [
    "Store",
    "get_store",
    "local_dir",
    "local_file",
    "mirror_dir",
    "mirror_file",
    "store_at",
]

#: Written last by :func:`mirror_dir`: a directory without it on the store is incomplete.
COMPLETE = ".aifab-complete"


class Store:
    """The workspace's bytes on one filesystem, addressed by keys relative to its root.

    Args:
        uri: ``s3://bucket/prefix`` and the like, or a local directory (the default store).
        options: keyword arguments for the fsspec filesystem (endpoint, credentials...).
    """

    def __init__(self, uri: str, **options: Any) -> None:
        protocol, sep, rest = uri.partition("://")
        if not sep:
            protocol, rest = "file", str(Path(uri).expanduser().resolve())
        if protocol != "file" and not rest.strip("/"):
            raise InvalidInputError(f"storage URI {uri!r} names no bucket")
        self.protocol = protocol
        self.root = rest.rstrip("/") if protocol != "file" else rest
        self.options = options

    def __repr__(self) -> str:
        return f"Store({self.uri!r})"

    @property
    def uri(self) -> str:
        """The store's URI (``s3://bucket/prefix``), or its absolute directory when local."""
        return self.root if self.is_local else f"{self.protocol}://{self.root}"

    @property
    def is_local(self) -> bool:
        """True for a directory on this machine: callers keep their plain-file fast paths."""
        return self.protocol == "file"

    @cached_property
    def fs(self) -> AbstractFileSystem:
        """The fsspec filesystem (imported on first use: the local default rarely needs it)."""
        import fsspec

        from aifab.core.extras import require

        if self.protocol == "s3":
            require("s3fs", "an s3:// storage URI")
            options = dict(self.options)
            # botocore honours AWS_ENDPOINT_URL(_S3) itself; s3fs needs it passed explicitly.
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            if endpoint and "endpoint_url" not in options:
                options["endpoint_url"] = endpoint
            # Other machines write to the same bucket: a cached listing would hide their objects.
            options.setdefault("use_listings_cache", False)
            return fsspec.filesystem("s3", **options)
        return fsspec.filesystem(self.protocol, **self.options)

    def path(self, key: str) -> str:
        """The filesystem path of ``key`` (no protocol), for :attr:`fs` calls."""
        return f"{self.root}/{key.lstrip('/')}" if key else self.root

    def url(self, key: str) -> str:
        """``key`` as a URL other libraries open (``s3://...``; a plain path when local)."""
        return self.path(key) if self.is_local else f"{self.protocol}://{self.path(key)}"

    def local_path(self, key: str) -> Path:
        """The file of ``key`` on this machine (local stores only).

        Raises:
            InvalidInputError: the store is not local.
        """
        if not self.is_local:
            raise InvalidInputError(f"{self.uri} is not a local directory")
        return Path(self.path(key))

    def exists(self, key: str) -> bool:
        """Whether an object (or a directory, locally) is stored under ``key``."""
        if self.is_local:
            return self.local_path(key).exists()
        return bool(self.fs.exists(self.path(key)))

    def size(self, key: str) -> int:
        """The size in bytes of the object ``key``."""
        if self.is_local:
            return self.local_path(key).stat().st_size
        return int(self.fs.size(self.path(key)))

    def read_bytes(self, key: str) -> bytes:
        """The content of ``key``.

        Raises:
            FileNotFoundError: nothing is stored there.
        """
        if self.is_local:
            return self.local_path(key).read_bytes()
        return bytes(self.fs.cat_file(self.path(key)))

    def write_bytes(self, key: str, data: bytes, *, once: bool = False) -> bool:
        """Store ``data`` under ``key`` atomically; with ``once``, only if nothing is there.

        Returns:
            False when ``once`` is set and an object already existed (it is left as it was).
        """
        with _staged_bytes(data) as tmp:
            return self.put_file(tmp, key, once=once)

    def put_file(self, local: Path, key: str, *, once: bool = False) -> bool:
        """Copy the file ``local`` to ``key`` atomically; ``once``: only if nothing is there.

        On object stores ``once`` is a conditional put (``If-None-Match: *``); where a store
        refuses those, the existence check before the put leaves only a race between writers
        of the same content-addressed bytes, which write the same rows.

        Returns:
            False when ``once`` is set and an object already existed.
        """
        if self.is_local:
            target = self.local_path(key)
            if once and target.exists():
                return False
            with atomic_path(target) as tmp, open(local, "rb") as src, open(tmp, "wb") as dst:
                while chunk := src.read(1 << 22):
                    dst.write(chunk)
            return True
        path = self.path(key)
        if once and self.fs.exists(path):
            return False
        try:
            self.fs.put_file(str(local), path, mode="create" if once else "overwrite")
        except FileExistsError:
            return False
        except OSError as exc:  # a 412 Precondition Failed surfaces as a plain OSError
            if once and "Precondition" in str(exc):
                return False
            raise
        return True

    def get_file(self, key: str, local: Path) -> None:
        """Copy ``key`` to the file ``local`` atomically (a reader never sees part of it).

        Raises:
            FileNotFoundError: nothing is stored under ``key``.
        """
        with atomic_path(local) as tmp:
            if self.is_local:
                with open(self.local_path(key), "rb") as src, open(tmp, "wb") as dst:
                    while chunk := src.read(1 << 22):
                        dst.write(chunk)
            else:
                self.fs.get_file(self.path(key), str(tmp))

    def put_dir(self, local: Path, prefix: str) -> list[str]:
        """Copy every file under the directory ``local`` to keys under ``prefix``."""
        keys = []
        for f in sorted(p for p in local.rglob("*") if p.is_file()):
            key = f"{prefix.rstrip('/')}/{f.relative_to(local).as_posix()}"
            self.put_file(f, key)
            keys.append(key)
        return keys

    def get_dir(self, prefix: str, local: Path) -> list[Path]:
        """Copy every object under ``prefix`` into the directory ``local``."""
        out = []
        for key in self.list(prefix):
            dest = local / key[len(prefix.rstrip("/")) + 1 :]
            self.get_file(key, dest)
            out.append(dest)
        return out

    def list(self, prefix: str) -> list[str]:
        """Keys of every object under ``prefix`` (recursively), sorted."""
        base = self.path(prefix)
        if self.is_local:
            root = Path(base)
            if not root.is_dir():
                return []
            found = [p for p in root.rglob("*") if p.is_file()]
            return sorted(f"{prefix.rstrip('/')}/{p.relative_to(root).as_posix()}" for p in found)
        try:
            paths = self.fs.find(base)
        except FileNotFoundError:
            return []
        cut = len(self.root) + 1
        return sorted(p[cut:] for p in paths)

    def delete(self, key: str) -> None:
        """Remove the object ``key`` (nothing if it is absent)."""
        if self.is_local:
            self.local_path(key).unlink(missing_ok=True)
            return
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.path(key))


@contextlib.contextmanager
def _staged_bytes(data: bytes) -> Iterator[Path]:
    fd, name = tempfile.mkstemp(prefix="aifab-store-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)


_stores: dict[str, Store] = {}


def get_store(settings: Settings | None = None) -> Store:
    """The store of the current settings: ``AIFAB_STORAGE_URI``, else the workspace directory."""
    settings = settings or get_settings()
    return store_at(settings.storage_uri or str(settings.resolved_home))


def store_at(uri: str) -> Store:
    """The store at ``uri``, made once per process.

    For code handed a URI instead of settings: a Ray worker on another node reads the store
    its driver names, with the credentials of its own environment.
    """
    store = _stores.get(uri)
    if store is None:
        store = _stores[uri] = Store(uri)
    return store


def mirror_file(key: str, *, once: bool = False) -> None:
    """Copy the workspace file ``<AIFAB_HOME>/<key>`` to the store (nothing when local).

    For files written locally first (fitted transforms, model directories' files) that other
    machines must read: they get them back with :func:`local_file`.
    """
    from aifab.core.workspace import get_workspace

    store = get_store()
    if not store.is_local:
        store.put_file(get_workspace().root / key, key, once=once)


def local_file(key: str) -> Path:
    """The workspace file ``<AIFAB_HOME>/<key>``, fetched from the store if this machine lacks it.

    Raises:
        FileNotFoundError: neither this machine nor the store has it.
    """
    from aifab.core.workspace import get_workspace

    path = get_workspace().root / key
    store = get_store()
    if not store.is_local and not path.is_file():
        store.get_file(key, path)
    return path


def mirror_dir(key: str) -> None:
    """Copy the workspace directory ``<AIFAB_HOME>/<key>`` to the store (nothing when local).

    A marker object goes last, so :func:`local_dir` never takes a half-copied directory.
    """
    from aifab.core.workspace import get_workspace

    store = get_store()
    if not store.is_local:
        store.put_dir(get_workspace().root / key, key)
        store.write_bytes(f"{key}/{COMPLETE}", b"")


def local_dir(key: str) -> Path:
    """The workspace directory ``<AIFAB_HOME>/<key>``, fetched whole from the store if missing.

    Raises:
        FileNotFoundError: neither this machine nor the store has a complete copy.
    """
    from aifab.core.workspace import get_workspace

    path = get_workspace().root / key
    store = get_store()
    if store.is_local or path.is_dir():
        return path
    if not store.exists(f"{key}/{COMPLETE}"):
        raise FileNotFoundError(f"{store.url(key)} is missing or incomplete")
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    try:
        store.get_dir(key, tmp)
        (tmp / COMPLETE).unlink(missing_ok=True)
        try:
            os.replace(tmp, path)  # one rename: readers see all of it or none
        except OSError:
            if not path.is_dir():  # not another process that fetched it first
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return path
