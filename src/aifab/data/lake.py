"""The lake: immutable, content-addressed Parquet objects, read and written through DuckDB.

A dataset version is an ordered list of objects (usually one; appends add more). Objects are
staged in ``tmp/`` and moved into ``lake/objects/`` by an atomic rename named after their content
hash, so a crash never leaves a partial object where a reader can see it. Each object names the
dataset version that wrote it in its Parquet key-value metadata (:func:`object_metadata`).

With ``AIFAB_STORAGE_URI`` set the objects live in the object store (:mod:`aifab.core.storage`,
keys ``lake/objects/...``), written once by a conditional put, and the local ``lake/`` is a
read-through cache of them: an object is immutable and named by its rows' hash, so a cached copy
never goes stale. DuckDB reads the cached files at local speed and the sandbox stays confined to
``lake/`` and ``tmp/``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq

from aifab.core.audit import audited
from aifab.core.errors import IntegrityError, InvalidInputError, first_line
from aifab.core.ids import new_id
from aifab.core.settings import get_settings
from aifab.core.storage import Store, get_store
from aifab.core.workspace import get_workspace

#: Rows per hashing batch; any value gives the same digest (the stream is row by row).
_HASH_BATCH = 1 << 20
#: Parquet key-value metadata keys of a lake object (see :func:`object_metadata`).
META_DATASET = "aifab.dataset"
META_VERSION = "aifab.version"
META_SCHEMA_HASH = "aifab.schema_hash"


def connect(
    sandboxed: bool = False, *, memory_limit: str | None = None, threads: int | None = None
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the workspace's memory cap and spill directory.

    Args:
        sandboxed: for connections that run user SQL (filters, rules, labeling functions,
            ``aifab data query``): files outside the lake and the scratch directory cannot be
            read or written, no extension is installed or loaded, and settings are locked.
            Statements are checked by :mod:`aifab.data.sandbox` before they run.
        memory_limit: DuckDB's memory cap (e.g. ``512MB``) instead of the workspace's.
        threads: DuckDB's threads instead of the workspace's.
    """
    settings = get_settings()
    ws = get_workspace(settings)
    con = duckdb.connect()
    # DuckDB draws a progress bar on stdout for long queries; it would corrupt --json output.
    con.execute("SET enable_progress_bar_print=false")
    memory_limit = memory_limit or settings.duckdb_memory_limit
    if memory_limit:
        con.execute(f"SET memory_limit={sql_string(memory_limit)}")
    con.execute(f"SET temp_directory='{ws.tmp / 'duckdb'}'")
    threads = threads or settings.duckdb_threads
    if threads:
        con.execute(f"SET threads={int(threads)}")
    if sandboxed:
        dirs = ", ".join(sql_string(str(p.resolve()) + "/") for p in (ws.lake, ws.tmp))
        con.execute(f"SET allowed_directories = [{dirs}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET autoinstall_known_extensions = false")
        con.execute("SET autoload_known_extensions = false")
        # Nothing the user's SQL runs can widen the sandbox again.
        con.execute("SET lock_configuration = true")
    return con


def sql_error(where: str, exc: duckdb.Error) -> InvalidInputError:
    """An :class:`InvalidInputError` carrying the first line of a DuckDB error."""
    return InvalidInputError(f"{where}: SQL error: {first_line(exc)}")


def sql_string(value: str) -> str:
    """Quote ``value`` as a SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def sql_ident(name: str) -> str:
    """Quote ``name`` as a SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def object_path(key: str) -> Path:
    """Absolute path of the lake object ``key`` on this machine.

    With an object store it is the cached copy, fetched whole (atomically) on first use.

    Raises:
        IntegrityError: the object store has no such object (``aifab data verify`` lists the
            versions that need it).
    """
    path = get_workspace().lake / key
    store = get_store()
    if not store.is_local and not path.is_file():
        try:
            store.get_file(f"lake/{key}", path)
        except FileNotFoundError:
            raise IntegrityError(f"lake object {key} is missing from {store.uri}") from None
    return path


def scan_sql(objects: Sequence[str]) -> str:
    """A ``read_parquet([...])`` table expression over the given object keys, in order."""
    return scan_sql_paths([object_path(k) for k in objects])


def scan_sql_paths(files: Sequence[Path]) -> str:
    """A ``read_parquet([...])`` table expression over absolute file paths."""
    return "read_parquet([" + ", ".join(sql_string(str(f)) for f in files) + "])"


def combine_hashes(digests: Sequence[str]) -> str:
    """Digest of an ordered list of digests (a version made of several objects)."""
    return hashlib.sha256("".join(digests).encode()).hexdigest()


def staging_path(suffix: str = ".parquet") -> Path:
    """A fresh path in the workspace's scratch directory (same filesystem as the lake)."""
    return get_workspace().tmp / f"{new_id('stage')}{suffix}"


def copy_to_parquet(
    con: duckdb.DuckDBPyConnection,
    select_sql: str,
    dest: Path,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Stream the result of ``select_sql`` into a Parquet file (bounded memory).

    Args:
        con: the DuckDB connection to run it on.
        select_sql: the query whose rows are written, in order.
        dest: the file to write.
        metadata: key-value metadata for the file's footer (see :func:`object_metadata`).
    """
    kv = ""
    if metadata:
        pairs = ", ".join(f"{sql_string(k)}: {sql_string(v)}" for k, v in metadata.items())
        kv = f", KV_METADATA {{{pairs}}}"
    con.execute(
        f"COPY ({select_sql}) TO {sql_string(str(dest))} "
        f"(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880{kv})"
    )


def object_metadata(
    dataset: str, version: int, schema: Sequence[Mapping[str, Any]]
) -> dict[str, str]:
    """The Parquet key-value metadata of an object written for ``dataset@version``.

    Objects are content-addressed and shared: an append's version lists its base's objects
    too, and the same rows committed again (to any dataset) reuse the stored file. So the
    metadata names the version whose commit wrote the file (the first to have these rows),
    not every version that lists it: the catalog records those.

    Args:
        dataset: the dataset's name.
        version: the version number the commit got.
        schema: the version's columns as the catalog records them (``name`` and ``type``).

    Returns:
        ``aifab.dataset``, ``aifab.version`` and ``aifab.schema_hash`` (SHA-256 of the
        ``name:type;`` column list) as strings.
    """
    columns = "".join(f"{c['name']}:{c['type']};" for c in schema)
    return {
        META_DATASET: dataset,
        META_VERSION: str(version),
        META_SCHEMA_HASH: hashlib.sha256(columns.encode()).hexdigest(),
    }


def _carries(path: Path, metadata: Mapping[str, str]) -> bool:
    found = pq.read_metadata(path).metadata or {}
    return all(found.get(k.encode()) == v.encode() for k, v in metadata.items())


def _stamped_copy(con: duckdb.DuckDBPyConnection, path: Path, metadata: Mapping[str, str]) -> Path:
    """A staged copy of the Parquet file ``path`` (same rows, same order) with ``metadata``."""
    staged = staging_path()
    try:
        copy_to_parquet(con, f"SELECT * FROM {scan_sql_paths([path])}", staged, metadata)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return staged


def _place(staged: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(staged, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(staged, target)


def restamp_object(
    con: duckdb.DuckDBPyConnection,
    key: str,
    expected: Mapping[str, str],
    metadata: Mapping[str, str],
) -> bool:
    """Give the object ``key`` new metadata if it still carries ``expected``; say if it did.

    For a commit that stamped the object with the version number it predicted and then got
    another (a concurrent writer took the number). An object another commit wrote keeps its
    stamp. The rows, hence the key, do not change; the file is replaced atomically.
    """
    path = object_path(key)
    if not _carries(path, expected):
        return False
    staged = _stamped_copy(con, path, metadata)
    try:
        store = get_store()
        if not store.is_local:  # same rows, new footer: one PUT replaces it atomically
            store.put_file(staged, f"lake/{key}")
        _place(staged, path)
    finally:
        staged.unlink(missing_ok=True)
    return True


def content_hash(con: duckdb.DuckDBPyConnection, files: Sequence[Path]) -> str:
    """Order-sensitive digest of the rows and column types in ``files``.

    Independent of how the rows are split into files or row groups, so re-ingesting the same
    content gives the same hash.
    """
    rel = scan_sql_paths(files)
    h = hashlib.sha256()
    for name, col_type, *_ in con.execute(f"DESCRIBE SELECT * FROM {rel}").fetchall():
        h.update(f"{name}:{col_type};".encode())
    # A row alias no column is called: ``hash(t)`` would hash a column named ``t`` instead.
    reader = con.sql(f"SELECT hash(__aifab_row) AS h FROM {rel} AS __aifab_row").to_arrow_reader(
        _HASH_BATCH
    )
    for batch in reader:
        h.update(batch.column(0).to_numpy(zero_copy_only=False).tobytes())
    return h.hexdigest()


def object_key(digest: str) -> str:
    """The lake key of the object whose rows hash to ``digest``."""
    return f"objects/{digest[:2]}/{digest}.parquet"


def object_problem(con: duckdb.DuckDBPyConnection, key: str) -> str | None:
    """Why the object ``key`` cannot be trusted (missing, unreadable, corrupt), or None if sound.

    The key names the content hash of the object's rows; it is recomputed from the file (from
    a fresh copy of the stored object when the lake is on an object store, not the cache).
    """
    store = get_store()
    if not store.is_local:
        return _stored_problem(con, store, key)
    path = object_path(key)
    if not path.is_file():
        return "missing"
    return _hash_problem(con, path, key)


def _hash_problem(con: duckdb.DuckDBPyConnection, path: Path, key: str) -> str | None:
    try:
        actual = content_hash(con, [path])
    except duckdb.Error as exc:
        return f"unreadable: {first_line(exc)}"
    if actual != Path(key).stem:
        return f"corrupt: its rows hash to {actual[:12]}, not {Path(key).stem[:12]}"
    return None


def put_object(
    staged: Path,
    digest: str,
    con: duckdb.DuckDBPyConnection | None = None,
    metadata: Mapping[str, str] | None = None,
) -> str:
    """Move a staged Parquet file into the lake under its digest; return its key.

    An object already stored under that digest is reused only after its rows are checked
    against the digest (with ``con``); a corrupt or unreadable one is replaced by the staged
    file, whose rows are known to hash to ``digest``. A file that is placed carries
    ``metadata`` (restamped first if the staged file lacks it); a reused one keeps its own.
    """
    key = object_key(digest)
    store = get_store()
    if not store.is_local:
        return _put_stored(store, staged, key, con or connect(), metadata)
    target = object_path(key)
    problem = object_problem(con or connect(), key) if target.exists() else None
    if target.exists() and problem is None:
        staged.unlink(missing_ok=True)
        return key
    if metadata and not _carries(staged, metadata):
        stamped = _stamped_copy(con or connect(), staged, metadata)
        staged.unlink(missing_ok=True)
        staged = stamped
    try:
        _place(staged, target)
    finally:
        staged.unlink(missing_ok=True)
    if problem is not None:
        audited("lake.object.repair", f"object:{key}", {"problem": problem})
    return key


def _stored_problem(con: duckdb.DuckDBPyConnection, store: Store, key: str) -> str | None:
    """:func:`object_problem` for an object store: hash a fresh download of the object."""
    fresh = staging_path()
    try:
        store.get_file(f"lake/{key}", fresh)
    except FileNotFoundError:
        return "missing"
    try:
        problem = _hash_problem(con, fresh, key)
    finally:
        fresh.unlink(missing_ok=True)
    if problem is not None:  # a cached copy of a bad object must not outlive its repair
        (get_workspace().lake / key).unlink(missing_ok=True)
    return problem


def _put_stored(
    store: Store,
    staged: Path,
    key: str,
    con: duckdb.DuckDBPyConnection,
    metadata: Mapping[str, str] | None,
) -> str:
    """:func:`put_object` for an object store: write once, check what another writer stored."""
    stored = store.exists(f"lake/{key}")
    problem = _stored_problem(con, store, key) if stored else None
    if stored and problem is None:
        staged.unlink(missing_ok=True)
        return key
    if metadata and not _carries(staged, metadata):
        stamped = _stamped_copy(con, staged, metadata)
        staged.unlink(missing_ok=True)
        staged = stamped
    try:
        # A repair overwrites; otherwise a conditional put, and a writer that lost the race
        # keeps the winner's object once its rows check out (same key, same rows).
        written = store.put_file(staged, f"lake/{key}", once=problem is None)
        if not written and (problem := _stored_problem(con, store, key)) is not None:
            store.put_file(staged, f"lake/{key}")
            written = True
        if written:
            _place(staged, get_workspace().lake / key)  # the cache holds what was stored
    finally:
        staged.unlink(missing_ok=True)
    if problem is not None:
        audited("lake.object.repair", f"object:{key}", {"problem": problem})
    return key
