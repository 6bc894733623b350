"""Pending pushed batches on the object store, sealed exactly once by any machine.

With ``AIFAB_STORAGE_URI`` set, each append lands as a write-once object
``lake/pending/<name>/<batch-id>.parquet`` (a conditional put), so every server sharing the
store sees every pending row and a node that dies loses none. Object stores have no rename to
claim batches with, so sealing does not claim: it takes the batches listed, commits the version
and records their ids (table ``sealed_batches``) in the version's own transaction, and only
then deletes the objects. The batch id is the table's primary key, so a batch is sealed once:
a node that sealed the same batches first wins, the other sees them recorded, deletes the
objects (if still there) and seals what is left. A crash between the commit and the deletes
leaves objects that the next flush finds recorded and deletes without sealing them again.

A version is appended to the version its seal started from: if another seal committed since,
the transaction rolls back and the seal starts over from the new latest version, so no seal
builds on a stale base and drops rows sealed meanwhile (locally too: :func:`commit_claimed`).

Batch ids carry their row count (``batch_<time>_<random>_<rows>``): counting pending rows is one
listing, not a read per batch. Failed attempts are write-once markers
``attempts/<batch-id>/<n>``; a batch out of attempts, or unreadable, is moved to ``failed/``
with a note, as locally.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import select
from sqlalchemy.orm import Session

from aifab.core.db import session_scope
from aifab.core.errors import ConflictError, IntegrityError, NotFoundError, first_line
from aifab.core.ids import new_id
from aifab.core.storage import Store, get_store
from aifab.core.workspace import get_workspace
from aifab.data import lake
from aifab.data.catalog import CommitResult, OnRecord, VersionInfo, commit_staged, resolve
from aifab.data.tables import SealedBatchRow, VersionRow

log = logging.getLogger("aifab.data.append")

#: Seals that lost a race to another node before this one gives up (each retries at once).
MAX_RACES = 20


class _Raced(Exception):
    """Another seal committed first (a newer version, or some of these batches)."""


def _prefix(name: str) -> str:
    return f"lake/pending/{name}"


def commit_batches(
    name: str, files: Sequence[Path], *, on_record: OnRecord | None = None
) -> CommitResult:
    """Commit Parquet batch files as the next version of ``name``: its latest version + them.

    Raises:
        _Raced: another version of ``name`` was committed since its latest was read (the new
            version would leave that one's rows out); nothing was recorded.
    """
    con = lake.connect()
    staged = lake.staging_path()
    lake.copy_to_parquet(con, f"SELECT * FROM {lake.scan_sql_paths(files)}", staged)
    rows = sum(pq.read_metadata(f).num_rows for f in files)
    base = latest(name)
    return commit_staged(
        name,
        staged,
        source="append",
        transform={"kind": "append", "rows": rows},
        parents=[base] if base else [],
        base=base,
        con=con,
        on_record=_guarded(base, on_record),
    )


def commit_claimed(name: str, files: Sequence[Path]) -> VersionInfo:
    """Commit batch files this process alone holds (claimed locally), on the latest version.

    Two seals of one dataset may run at once (two processes, the server's sealer workers); one
    that finds a version committed meanwhile starts over on it instead of dropping its rows.

    Raises:
        ConflictError: other seals kept committing first :data:`MAX_RACES` times.
    """
    for _ in range(MAX_RACES):
        try:
            return commit_batches(name, files).version
        except _Raced:
            continue
    raise ConflictError(f"dataset {name!r}: other seals kept committing first; flush again")


def latest(name: str) -> VersionInfo | None:
    """The newest version of ``name``, or None if it has none."""
    try:
        return resolve(name)
    except NotFoundError:
        return None


def _guarded(base: VersionInfo | None, inner: OnRecord | None) -> OnRecord:
    def check(session: Session, row: VersionRow) -> None:
        if row.version != (base.version if base else 0) + 1:
            raise _Raced(f"version {row.version - 1} was committed meanwhile")
        if inner is not None:
            inner(session, row)

    return check


def land(name: str, table: pa.Table) -> None:
    """Store ``table`` as a new pending batch of ``name`` (write-once)."""
    tmp = lake.staging_path()
    try:
        pq.write_table(table, tmp)
        key = f"{_prefix(name)}/{new_id('batch')}_{table.num_rows}.parquet"
        get_store().put_file(tmp, key, once=True)
    finally:
        tmp.unlink(missing_ok=True)


def _batches(store: Store, name: str) -> dict[str, str]:
    """Batch id -> key of every pending batch of ``name`` on the store, oldest first."""
    prefix = _prefix(name)
    out = {}
    for key in store.list(prefix):
        rest = key[len(prefix) + 1 :]
        if "/" not in rest and rest.endswith(".parquet"):
            out[rest.removesuffix(".parquet")] = key
    return out


def _rows_of(batch_id: str) -> int:
    try:
        return int(batch_id.rsplit("_", 1)[1])
    except (IndexError, ValueError):
        return 0  # not written by land(): flushed like any other, counted as unknown


def count_rows(name: str) -> int:
    """Rows pending for ``name`` on the store (one listing)."""
    return sum(_rows_of(b) for b in _batches(get_store(), name))


def pending_schema(name: str) -> pa.Schema | None:
    """The schema of the oldest pending batch (a dataset's first records set it)."""
    store = get_store()
    for key in _batches(store, name).values():
        try:
            with store.fs.open(store.path(key), "rb") as fh:
                return pq.ParquetFile(fh).schema_arrow
        except FileNotFoundError:
            continue  # sealed meanwhile
    return None


def _sealed(name: str, ids: Sequence[str]) -> set[str]:
    if not ids:
        return set()
    with session_scope() as s:
        return set(
            s.scalars(
                select(SealedBatchRow.batch_id).where(
                    SealedBatchRow.dataset == name, SealedBatchRow.batch_id.in_(list(ids))
                )
            )
        )


def _recorder(name: str, ids: Sequence[str]) -> OnRecord:
    def record(session: Session, row: VersionRow) -> None:
        found = session.scalars(
            select(SealedBatchRow.batch_id).where(
                SealedBatchRow.dataset == name, SealedBatchRow.batch_id.in_(list(ids))
            )
        ).first()
        if found is not None:
            raise _Raced(f"batch {found} was sealed meanwhile")
        now = time.time()
        for b in ids:
            session.add(SealedBatchRow(dataset=name, batch_id=b, version_id=row.id, sealed_at=now))

    return record


def _record_found(name: str, ids: Sequence[str], version: VersionInfo) -> None:
    """Mark ``ids`` sealed into ``version``, an existing version already holding their rows."""
    from sqlalchemy import exc as sa_exc

    try:
        with session_scope() as s:
            for b in set(ids) - _sealed(name, ids):
                s.add(SealedBatchRow(dataset=name, batch_id=b, version_id=version.id))
    except sa_exc.IntegrityError:
        pass  # another node recorded them first: sealed either way


def flush(name: str, max_attempts: int) -> VersionInfo | None:
    """Seal every pending batch of ``name`` on the store; ``None`` if nothing was pending.

    Raises:
        IntegrityError: the commit failed (the batches stay pending, or are set aside after
            ``max_attempts`` failures).
        ConflictError: other nodes kept sealing first :data:`MAX_RACES` times.
    """
    store = get_store()
    for _ in range(MAX_RACES):
        batches = _batches(store, name)
        done = _sealed(name, list(batches))
        for b in done:  # a seal that died before its deletes (or another node's, now)
            _forget(store, name, b, batches[b])
        todo = {b: k for b, k in batches.items() if b not in done}
        if not todo:
            return None
        workdir = Path(tempfile.mkdtemp(prefix="seal-", dir=get_workspace().tmp))
        try:
            files = _fetch(store, name, todo, workdir, max_attempts)
            if not files:
                continue
            ids = list(files)
            try:
                result = commit_batches(name, list(files.values()), on_record=_recorder(name, ids))
            except _Raced:
                continue
            except Exception as exc:
                _failed_attempt(store, name, todo, ids, first_line(exc), max_attempts)
                raise IntegrityError(
                    f"dataset {name!r}: sealing {len(ids)} pending batch(es) failed: "
                    f"{first_line(exc)}"
                ) from exc
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        if not result.created:
            _record_found(name, ids, result.version)
        for b in ids:
            _forget(store, name, b, todo[b])
        return result.version
    raise ConflictError(f"dataset {name!r}: other nodes kept sealing first; flush again")


def _fetch(
    store: Store, name: str, todo: dict[str, str], workdir: Path, max_attempts: int
) -> dict[str, Path]:
    """Download the batches; vanished ones (sealed meanwhile) are skipped, unreadable set aside."""
    files = {}
    for b, key in todo.items():
        path = workdir / f"{b}.parquet"
        try:
            store.get_file(key, path)
        except FileNotFoundError:
            continue
        try:
            pq.read_metadata(path)
        except (OSError, pa.ArrowInvalid) as exc:
            _set_aside(store, name, b, key, max_attempts, first_line(exc))
            continue
        files[b] = path
    return files


def _forget(store: Store, name: str, batch: str, key: str) -> None:
    store.delete(key)
    for marker in store.list(f"{_prefix(name)}/attempts/{batch}"):
        store.delete(marker)


def _failed_attempt(
    store: Store, name: str, todo: dict[str, str], ids: Sequence[str], reason: str, most: int
) -> None:
    """Count a failed seal against each batch; set aside those out of attempts."""
    for b in ids:
        prefix = f"{_prefix(name)}/attempts/{b}"
        n = len(store.list(prefix)) + 1
        store.write_bytes(f"{prefix}/{n}", reason.encode(), once=True)
        if n >= most:
            _set_aside(store, name, b, todo[b], n, reason)


def _set_aside(store: Store, name: str, batch: str, key: str, attempts: int, reason: str) -> None:
    """Move a batch that cannot be committed to ``failed/``, with why, for people to look at."""
    failed = f"{_prefix(name)}/failed/{batch}"
    note = {"attempts": attempts, "reason": reason, "ts": time.time()}
    store.write_bytes(f"{failed}.parquet.json", json.dumps(note).encode())
    try:
        store.write_bytes(f"{failed}.parquet", store.read_bytes(key), once=True)
    except FileNotFoundError:
        return  # sealed or set aside by another node meanwhile
    _forget(store, name, batch, key)
    log.warning("pending batch %s of %s set aside: %s", batch, name, reason)
