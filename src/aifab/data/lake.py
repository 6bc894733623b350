"""The lake: immutable, content-addressed Parquet objects, read and written through DuckDB.

A dataset version is an ordered list of objects (usually one; appends add more). Objects are
staged in ``tmp/`` and moved into ``lake/objects/`` by an atomic rename named after their content
hash, so a crash never leaves a partial object where a reader can see it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import duckdb

from aifab.core.audit import audited
from aifab.core.errors import InvalidInputError, first_line
from aifab.core.ids import new_id
from aifab.core.settings import get_settings
from aifab.core.workspace import get_workspace

#: Rows per hashing batch; any value gives the same digest (the stream is row by row).
_HASH_BATCH = 1 << 20


def connect(sandboxed: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the workspace's memory cap and spill directory.

    Args:
        sandboxed: for connections that run user SQL (filters, rules, labeling functions,
            ``aifab data query``): files outside the lake and the scratch directory cannot be
            read or written, no extension is installed or loaded, and settings are locked.
            Statements are checked by :mod:`aifab.data.sandbox` before they run.
    """
    settings = get_settings()
    ws = get_workspace(settings)
    con = duckdb.connect()
    # DuckDB draws a progress bar on stdout for long queries; it would corrupt --json output.
    con.execute("SET enable_progress_bar_print=false")
    if settings.duckdb_memory_limit:
        con.execute(f"SET memory_limit='{settings.duckdb_memory_limit}'")
    con.execute(f"SET temp_directory='{ws.tmp / 'duckdb'}'")
    if settings.duckdb_threads:
        con.execute(f"SET threads={int(settings.duckdb_threads)}")
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
    """Absolute path of the lake object ``key``."""
    return get_workspace().lake / key


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


def copy_to_parquet(con: duckdb.DuckDBPyConnection, select_sql: str, dest: Path) -> None:
    """Stream the result of ``select_sql`` into a Parquet file (bounded memory)."""
    con.execute(
        f"COPY ({select_sql}) TO {sql_string(str(dest))} "
        "(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880)"
    )


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

    The key names the content hash of the object's rows; it is recomputed from the file.
    """
    path = object_path(key)
    if not path.is_file():
        return "missing"
    try:
        actual = content_hash(con, [path])
    except duckdb.Error as exc:
        return f"unreadable: {first_line(exc)}"
    if actual != Path(key).stem:
        return f"corrupt: its rows hash to {actual[:12]}, not {Path(key).stem[:12]}"
    return None


def put_object(staged: Path, digest: str, con: duckdb.DuckDBPyConnection | None = None) -> str:
    """Move a staged Parquet file into the lake under its digest; return its key.

    An object already stored under that digest is reused only after its rows are checked
    against the digest (with ``con``); a corrupt or unreadable one is replaced by the staged
    file, whose rows are known to hash to ``digest``.
    """
    key = object_key(digest)
    target = object_path(key)
    problem = object_problem(con or connect(), key) if target.exists() else None
    if target.exists() and problem is None:
        staged.unlink(missing_ok=True)
        return key
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(staged, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(staged, target)
    if problem is not None:
        audited("lake.object.repair", f"object:{key}", {"problem": problem})
    return key
