"""Pushed events (devices, IoT, the server's records route) appended in micro-batches.

Each call lands its records durably as a small pending Parquet file (atomic rename), so nothing
is lost if the process dies. When enough rows are pending (or on ``flush``) the pending files are
claimed by renaming them into a claim folder (only one process can win a rename), merged, and
committed as a new version made of the previous version's objects plus one new object. A claim
left by a dead process is handed back on the next flush. A batch whose commit keeps failing is
set aside in ``failed/`` with its reason after a few attempts, so it is not retried forever.

With ``AIFAB_STORAGE_URI`` set the batches are write-once objects on the store instead, seen and
sealed exactly once by any machine (:mod:`aifab.data.pending_store`); unset, nothing changes.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from aifab.core.atomic import atomic_path, atomic_write_text
from aifab.core.errors import IntegrityError, InvalidInputError, first_line
from aifab.core.ids import new_id
from aifab.core.settings import get_settings
from aifab.core.storage import get_store
from aifab.core.workspace import get_workspace
from aifab.data import lake, pending_store
from aifab.data.catalog import VersionInfo
from aifab.data.quarantine import QuarantineItem, quarantine
from aifab.data.refs import check_name

log = logging.getLogger("aifab.data.append")

#: Pending rows that trigger sealing a new version.
DEFAULT_BATCH_ROWS = 1000
#: Failed commits of a pending batch before it is set aside in ``failed/``.
MAX_COMMIT_ATTEMPTS = 3
_ATTEMPTS = "attempts.json"


@dataclass(frozen=True)
class AppendResult:
    """What an append did: rows accepted/quarantined, rows still pending, the sealed version."""

    accepted: int
    quarantined: int
    pending_rows: int
    version: VersionInfo | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "accepted": self.accepted,
            "quarantined": self.quarantined,
            "pending_rows": self.pending_rows,
            "version": self.version.ref if self.version else None,
        }


def _pending_dir(name: str) -> Path:
    return get_workspace().lake / "pending" / name


def _to_table(
    records: Sequence[Mapping[str, Any]], schema: pa.Schema | None
) -> tuple[pa.Table, list[QuarantineItem]]:
    """Records -> Arrow table in ``schema``; records that do not fit are quarantined.

    A push that fits is converted in one go; when some records do not, halves are tried until
    the misfits are found (a conversion per record of a 2,048-column schema took seconds).
    """
    for i, rec in enumerate(records):
        if not isinstance(rec, Mapping):
            raise InvalidInputError(f"record {i}: expected an object, got {type(rec).__name__}")
    if schema is None:
        try:
            return pa.Table.from_pylist(list(records), schema=None), []
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"records do not form a table: {exc}") from None
    names = set(schema.names)
    good: list[pa.Table] = []
    bad: list[QuarantineItem] = []
    known: list[tuple[int, Mapping[str, Any]]] = []
    for i, rec in enumerate(records):
        extra = rec.keys() - names
        if extra:
            item = json.loads(json.dumps(rec, default=str))
            bad.append(QuarantineItem("schema", f"unknown fields {sorted(extra)}", item, i))
        else:
            known.append((i, rec))
    _sort_fits(known, schema, good, bad)
    bad.sort(key=lambda item: item.line or 0)
    if not good:
        return schema.empty_table(), bad
    return (good[0] if len(good) == 1 else pa.concat_tables(good)), bad


def _sort_fits(
    records: list[tuple[int, Mapping[str, Any]]],
    schema: pa.Schema,
    good: list[pa.Table],
    bad: list[QuarantineItem],
) -> None:
    """Put tables of the records fitting ``schema`` in ``good`` (in order), misfits in ``bad``."""
    if not records:
        return
    try:
        table = pa.Table.from_pylist([rec for _, rec in records], schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
        if len(records) == 1:
            i, rec = records[0]
            item = json.loads(json.dumps(rec, default=str))
            bad.append(QuarantineItem("schema", first_line(exc), item, i))
            return
        half = len(records) // 2
        _sort_fits(records[:half], schema, good, bad)
        _sort_fits(records[half:], schema, good, bad)
        return
    good.append(table)


def _check_width(records: Sequence[Mapping[str, Any]], new_schema: bool) -> None:
    """Refuse records (or a new schema) wider than ``AIFAB_MAX_COLUMNS``.

    Width drives the cost of every later commit and profile, so it is bounded before any work.
    """
    cap = get_settings().max_columns
    for i, rec in enumerate(records):
        if isinstance(rec, Mapping) and len(rec) > cap:
            raise InvalidInputError(
                f"record {i}: {len(rec)} columns is over the limit of {cap} columns "
                "(setting AIFAB_MAX_COLUMNS)"
            )
    if new_schema:
        columns = set().union(*(rec for rec in records if isinstance(rec, Mapping)))
        if len(columns) > cap:
            raise InvalidInputError(
                f"records: a new schema of {len(columns)} columns is over the limit of {cap} "
                "columns (setting AIFAB_MAX_COLUMNS)"
            )


def append_records(
    name: str,
    records: Sequence[Mapping[str, Any]],
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    flush: bool = False,
    seal: bool = True,
) -> AppendResult:
    """Append pushed records to dataset ``name``.

    Args:
        name: the dataset (created on first append; later records must fit its schema).
        records: JSON-like objects; those that do not fit the schema go to quarantine.
        batch_rows: seal a new version once this many rows are pending.
        flush: seal a version now, whatever is pending.
        seal: False: only land the records; the caller seals (:func:`flush_appends`) when
            ``pending_rows`` reaches ``batch_rows`` (the server does it off its request threads).

    Returns:
        Counts, and the version sealed by this call if any.

    Raises:
        InvalidInputError: a bad name, no records, or records over ``AIFAB_MAX_COLUMNS``.
    """
    check_name(name)
    if not records and not flush:
        raise InvalidInputError("no records to append")
    latest = pending_store.latest(name)
    # With an object store the batches live there, seen (and sealed) by every machine.
    stored = not get_store().is_local
    pending = _pending_dir(name)
    if latest is not None:
        schema = pq.read_schema(lake.object_path(latest.objects[-1]))
    else:
        schema = pending_store.pending_schema(name) if stored else _pending_schema(pending)
    _check_width(records, new_schema=schema is None)
    table, bad = _to_table(records, schema)
    if bad:
        quarantine(name, "append", bad, latest.id if latest else None)
    if table.num_rows and stored:
        pending_store.land(name, table)
    elif table.num_rows:
        with atomic_path(pending / f"{new_id('batch')}.parquet") as tmp:
            pq.write_table(table, tmp)
    rows = pending_store.count_rows(name) if stored else _count_rows(pending)
    sealed = None
    if seal and rows and (flush or rows >= batch_rows):
        sealed = flush_appends(name)
        rows = pending_store.count_rows(name) if stored else _count_rows(pending)
    return AppendResult(table.num_rows, len(bad), rows, sealed)


def _pending_schema(pending: Path) -> pa.Schema | None:
    files = sorted(pending.glob("*.parquet")) if pending.exists() else []
    return pq.read_schema(files[0]) if files else None


def _count_rows(pending: Path) -> int:
    if not pending.exists():
        return 0
    rows = 0
    for f in pending.glob("*.parquet"):
        try:
            rows += pq.read_metadata(f).num_rows
        except FileNotFoundError:
            continue  # claimed meanwhile
        except (OSError, pa.ArrowInvalid) as exc:
            # An unreadable batch can never commit: set it aside now, not on every push.
            _set_aside(pending, f, MAX_COMMIT_ATTEMPTS, first_line(exc))
    return rows


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _recover_claims(pending: Path) -> None:
    """Hand files claimed by dead processes back to the pending folder."""
    for claim in pending.glob("claim-*"):
        pid = int(claim.name.split("-")[1])
        if _pid_alive(pid) and pid != os.getpid():
            continue
        for f in claim.glob("*.parquet"):
            os.replace(f, pending / f.name)
        shutil.rmtree(claim, ignore_errors=True)


def flush_appends(name: str) -> VersionInfo | None:
    """Seal every pending record of ``name`` into a new version; ``None`` if nothing pending.

    On an object store any machine may seal; each batch is sealed exactly once
    (:mod:`aifab.data.pending_store`).
    """
    if not get_store().is_local:
        return pending_store.flush(name, MAX_COMMIT_ATTEMPTS)
    pending = _pending_dir(name)
    if not pending.exists():
        return None
    _recover_claims(pending)
    claim = pending / f"claim-{os.getpid()}-{os.urandom(4).hex()}"
    claim.mkdir()
    for f in sorted(pending.glob("*.parquet")):
        try:
            os.replace(f, claim / f.name)
        except FileNotFoundError:
            continue  # another process claimed it first
    files = sorted(claim.glob("*.parquet"))
    if not files:
        claim.rmdir()
        return None
    try:
        version = pending_store.commit_claimed(name, files)
    except Exception as exc:
        _give_back(pending, claim, files, first_line(exc))
        raise IntegrityError(
            f"dataset {name!r}: sealing {len(files)} pending batch(es) failed: {first_line(exc)}"
        ) from exc
    shutil.rmtree(claim, ignore_errors=True)
    return version


def _give_back(pending: Path, claim: Path, files: list[Path], reason: str) -> None:
    """Return a failed claim's batches to pending, or set aside those out of attempts."""
    path = pending / _ATTEMPTS
    attempts: dict[str, int] = json.loads(path.read_text()) if path.exists() else {}
    for f in files:
        n = attempts.pop(f.name, 0) + 1
        if n >= MAX_COMMIT_ATTEMPTS:
            _set_aside(pending, f, n, reason)
        else:
            attempts[f.name] = n
            os.replace(f, pending / f.name)
    atomic_write_text(path, json.dumps(attempts))
    shutil.rmtree(claim, ignore_errors=True)


def _set_aside(pending: Path, batch: Path, attempts: int, reason: str) -> None:
    """Move a batch that cannot be committed to ``failed/``, with why, for people to look at."""
    failed = pending / "failed"
    failed.mkdir(exist_ok=True)
    os.replace(batch, failed / batch.name)
    note = {"attempts": attempts, "reason": reason, "ts": time.time()}
    atomic_write_text(failed / f"{batch.name}.json", json.dumps(note))
    log.warning("pending batch %s of %s set aside: %s", batch.name, pending.name, reason)
