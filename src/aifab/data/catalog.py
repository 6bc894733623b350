"""The dataset catalog: resolving references and committing new immutable versions.

Every transform in the data layer ends in :func:`commit_query` or :func:`commit_staged`: stage a
Parquet file, hash its rows, move it into the lake, then record the version, its lineage and an
audit event in one transaction. Identical content returns the existing version.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
from sqlalchemy import exc as sa_exc
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from aifab.core.actor import current_actor
from aifab.core.audit import record_event
from aifab.core.db import lock_aggregate, session_scope
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.data import lake
from aifab.data.profile import profile_relation
from aifab.data.refs import DatasetRef, check_name, parse_ref
from aifab.data.tables import DatasetRow, LineageEdge, VersionRow

#: Versions up to this many rows get their profile at commit; larger ones on first use.
EAGER_PROFILE_MAX_ROWS = 1_000_000

#: Called inside the transaction that inserts a new version row (after its flush): what it adds
#: commits with the version or not at all; what it raises rolls the version back.
OnRecord = Callable[[Session, VersionRow], None]


@dataclass(frozen=True)
class VersionInfo:
    """A dataset version as the rest of aifab sees it."""

    id: int
    dataset: str
    version: int
    content_hash: str
    objects: tuple[str, ...]
    schema: list[dict[str, Any]]
    num_rows: int
    num_bytes: int
    source: str
    transform: dict[str, Any]
    created_at: float
    created_by: str
    parents: list[str] = field(default_factory=list)
    profile: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ref(self) -> str:
        """``NAME@VERSION``."""
        return f"{self.dataset}@{self.version}"

    @property
    def columns(self) -> list[str]:
        """Column names in order."""
        return [c["name"] for c in self.schema]

    def scan_sql(self) -> str:
        """A DuckDB table expression reading this version."""
        return lake.scan_sql(self.objects)

    def to_dict(self, with_profile: bool = False) -> dict[str, Any]:
        """A JSON-ready dict (profile omitted unless asked for)."""
        d = asdict(self)
        d["ref"] = self.ref
        d["objects"] = list(self.objects)
        if not with_profile:
            d.pop("profile")
        return d


@dataclass(frozen=True)
class CommitResult:
    """The version a commit produced, and whether it is new."""

    version: VersionInfo
    created: bool


def _info(session: Session, row: VersionRow, name: str) -> VersionInfo:
    parent_refs = session.execute(
        select(DatasetRow.name, VersionRow.version)
        .join(VersionRow, VersionRow.dataset_id == DatasetRow.id)
        .join(LineageEdge, LineageEdge.parent_id == VersionRow.id)
        .where(LineageEdge.child_id == row.id)
        .order_by(VersionRow.id)
    ).all()
    return VersionInfo(
        id=row.id,
        dataset=name,
        version=row.version,
        content_hash=row.content_hash,
        objects=tuple(row.objects),
        schema=list(row.schema),
        num_rows=row.num_rows,
        num_bytes=row.num_bytes,
        source=row.source,
        transform=dict(row.transform),
        created_at=row.created_at,
        created_by=row.created_by,
        parents=[f"{n}@{v}" for n, v in parent_refs],
        profile=dict(row.profile),
    )


def _dataset(session: Session, name: str) -> DatasetRow:
    ds = session.scalar(select(DatasetRow).where(DatasetRow.name == name))
    if ds is None:
        raise NotFoundError(f"dataset {name!r} not found (see 'aifab data list')")
    return ds


def resolve_in(session: Session, ref: str | DatasetRef) -> VersionInfo:
    """Resolve a reference inside an open session."""
    r = parse_ref(ref) if isinstance(ref, str) else ref
    ds = _dataset(session, r.name)
    q = select(VersionRow).where(VersionRow.dataset_id == ds.id)
    if r.version is not None:
        q = q.where(VersionRow.version == r.version)
    elif r.content_hash is not None:
        q = q.where(VersionRow.content_hash.startswith(r.content_hash))
    row = session.scalar(q.order_by(VersionRow.version.desc()).limit(1))
    if row is None:
        what = "has no versions" if r == DatasetRef(r.name) else f"has no version {str(r)!r}"
        raise NotFoundError(f"dataset {r.name!r} {what}")
    return _info(session, row, ds.name)


def resolve(ref: str | DatasetRef) -> VersionInfo:
    """Resolve ``NAME`` or ``NAME@VERSION`` to a version; :class:`NotFoundError` if absent."""
    with session_scope(readonly=True) as s:
        return resolve_in(s, ref)


def list_versions(name: str) -> list[VersionInfo]:
    """All versions of a dataset, oldest first."""
    with session_scope(readonly=True) as s:
        ds = _dataset(s, name)
        rows = s.scalars(
            select(VersionRow).where(VersionRow.dataset_id == ds.id).order_by(VersionRow.version)
        )
        return [_info(s, r, ds.name) for r in rows]


def list_version_summaries(name: str, *, offset: int = 0, limit: int = 50) -> list[dict[str, Any]]:
    """One page of a dataset's versions, newest first, without schemas or profiles.

    Only the listed rows are read, so a page costs the same with 10 versions or 10,000.

    Args:
        name: the dataset.
        offset: versions to skip (newest first).
        limit: at most this many versions.

    Returns:
        ``{"ref", "version", "content_hash", "num_rows", "num_bytes", "source", "transform",
        "created_at", "created_by"}`` per version; ``transform`` is its kind.

    Raises:
        NotFoundError: no such dataset.
        InvalidInputError: a negative offset or a limit under 1.
    """
    if offset < 0 or limit < 1:
        raise InvalidInputError(f"offset must be >= 0 and limit >= 1 (got {offset}, {limit})")
    with session_scope(readonly=True) as s:
        ds = _dataset(s, name)
        rows = s.execute(
            select(
                VersionRow.version,
                VersionRow.content_hash,
                VersionRow.num_rows,
                VersionRow.num_bytes,
                VersionRow.source,
                VersionRow.transform,
                VersionRow.created_at,
                VersionRow.created_by,
            )
            .where(VersionRow.dataset_id == ds.id)
            .order_by(VersionRow.version.desc())
            .offset(offset)
            .limit(limit)
        ).all()
        return [
            {
                "ref": f"{ds.name}@{r.version}",
                "version": r.version,
                "content_hash": r.content_hash,
                "num_rows": r.num_rows,
                "num_bytes": r.num_bytes,
                "source": r.source,
                "transform": (r.transform or {}).get("kind"),
                "created_at": r.created_at,
                "created_by": r.created_by,
            }
            for r in rows
        ]


def list_datasets(*, offset: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
    """One summary per dataset: name, latest version, rows, versions count, updated time.

    Args:
        offset: datasets to skip (in name order).
        limit: at most this many datasets (None: all).
    """
    with session_scope(readonly=True) as s:
        latest = (
            select(
                VersionRow.dataset_id,
                func.max(VersionRow.version).label("v"),
                func.count(VersionRow.id).label("n"),
            )
            .group_by(VersionRow.dataset_id)
            .subquery()
        )
        # Not the whole version row: a wide version's profile is megabytes of JSON.
        v = VersionRow
        rows = s.execute(
            select(DatasetRow, v.version, v.num_rows, v.schema, v.created_at, latest.c.n)
            .join(latest, latest.c.dataset_id == DatasetRow.id)
            .join(
                VersionRow,
                (VersionRow.dataset_id == DatasetRow.id) & (VersionRow.version == latest.c.v),
            )
            .order_by(DatasetRow.name)
            .offset(max(0, offset))
            .limit(limit)
        ).all()
        return [
            {
                "name": ds.name,
                "latest": f"{ds.name}@{version}",
                "versions": int(n),
                "rows": num_rows,
                "columns": len(schema),
                "updated_at": created_at,
                "description": ds.description,
            }
            for ds, version, num_rows, schema, created_at, n in rows
        ]


def _describe(con: duckdb.DuckDBPyConnection, rel: str) -> list[dict[str, Any]]:
    return [
        {"name": name, "type": col_type, "nullable": nullable == "YES"}
        for name, col_type, nullable, *_ in con.execute(f"DESCRIBE SELECT * FROM {rel}").fetchall()
    ]


def _existing(session: Session, name: str, content_hash: str) -> VersionInfo | None:
    ds = session.scalar(select(DatasetRow).where(DatasetRow.name == name))
    if ds is None:
        return None
    row = session.scalar(
        select(VersionRow).where(
            VersionRow.dataset_id == ds.id, VersionRow.content_hash == content_hash
        )
    )
    return _info(session, row, name) if row else None


def _record(
    name: str,
    content_hash: str,
    objects: Sequence[str],
    meta: dict[str, Any],
    parents: Sequence[VersionInfo],
    description: str,
    on_record: OnRecord | None = None,
) -> CommitResult:
    """Insert the version row under the dataset's lock.

    A unique-key clash (two first commits of a new dataset racing for its name) is retried.
    """
    for attempt in range(50):
        try:
            with session_scope() as s:
                lock_aggregate(s, "dataset", name)  # committers of one dataset take turns
                found = _existing(s, name, content_hash)
                if found is not None:
                    return CommitResult(found, created=False)
                ds = s.scalar(select(DatasetRow).where(DatasetRow.name == name))
                if ds is None:
                    ds = DatasetRow(name=name, description=description, created_at=time.time())
                    s.add(ds)
                    s.flush()
                top = s.scalar(
                    select(func.max(VersionRow.version)).where(VersionRow.dataset_id == ds.id)
                )
                row = VersionRow(
                    dataset_id=ds.id,
                    version=(top or 0) + 1,
                    content_hash=content_hash,
                    objects=list(objects),
                    created_at=time.time(),
                    created_by=current_actor(),
                    **meta,
                )
                s.add(row)
                s.flush()
                for p in {p.id for p in parents}:
                    s.add(LineageEdge(child_id=row.id, parent_id=p))
                if on_record is not None:
                    on_record(s, row)
                record_event(
                    s,
                    "dataset.version.create",
                    f"dataset:{name}@{row.version}",
                    {
                        "content_hash": content_hash,
                        "transform": meta["transform"],
                        "parents": [p.ref for p in parents],
                    },
                )
                s.flush()
                return CommitResult(_info(s, row, name), created=True)
        except sa_exc.IntegrityError:
            time.sleep(0.005 * (attempt + 1))
    raise RuntimeError(f"could not commit a version of {name!r}: too much contention")


def ensure_profile(version: VersionInfo) -> dict[str, Any]:
    """The version's column profile, computed and stored on first use if the commit skipped it.

    Profiles of versions over :data:`EAGER_PROFILE_MAX_ROWS` rows are deferred: pipelines make
    many intermediate versions, and profiling each would cost more than producing it.
    """
    if version.profile:
        return version.profile
    profile = profile_relation(lake.connect(), version.scan_sql())
    with session_scope() as s:
        row = s.get(VersionRow, version.id)
        if row is not None:
            row.profile = profile
    return profile


def commit_staged(
    name: str,
    staged: Path,
    *,
    source: str,
    transform: dict[str, Any],
    parents: Sequence[VersionInfo] = (),
    base: VersionInfo | None = None,
    description: str = "",
    con: duckdb.DuckDBPyConnection | None = None,
    on_record: OnRecord | None = None,
) -> CommitResult:
    """Commit a staged Parquet file as the next version of ``name``.

    Args:
        name: dataset to add the version to (created if new).
        staged: a Parquet file in the workspace's ``tmp/``; it is moved into the lake.
        source: where the data came from (path, URL, ``clean(iris@2)``...).
        transform: what produced it, e.g. ``{"kind": "clean", "spec": {...}}``.
        parents: versions it was derived from (lineage edges).
        base: when set, the new version is ``base``'s objects followed by the staged one
            (appends), instead of the staged object alone.
        description: dataset description, used only when the dataset is created.
        con: a DuckDB connection to reuse.
        on_record: run in the version's transaction (see :data:`OnRecord`); not run when the
            content already exists as a version (``created`` is False).
    """
    check_name(name)
    con = con or lake.connect()
    obj_digest = lake.content_hash(con, [staged])
    digest = obj_digest if base is None else lake.combine_hashes([base.content_hash, obj_digest])
    with session_scope(readonly=True) as s:
        found = _existing(s, name, digest)
    if found is not None:
        if lake.object_key(obj_digest) in found.objects:
            # Checks the stored object; a repair writes it again, stamped as that version.
            stamp = lake.object_metadata(name, found.version, found.schema)
            lake.put_object(staged, obj_digest, con, stamp)
        staged.unlink(missing_ok=True)
        return CommitResult(found, created=False)
    rel = lake.scan_sql_paths([staged])
    meta: dict[str, Any] = {
        "schema": _describe(con, rel),
        "profile": {},
        "num_rows": 0,
        "num_bytes": 0,
        "source": source,
        "transform": transform,
    }
    meta["num_rows"] = pq.read_metadata(staged).num_rows + (base.num_rows if base else 0)
    predicted = _next_version(name)
    stamp = lake.object_metadata(name, predicted, meta["schema"])
    key = lake.put_object(staged, obj_digest, con, stamp)
    meta["num_bytes"] = lake.object_path(key).stat().st_size
    objects = [*(base.objects if base else ()), key]
    if meta["num_rows"] <= EAGER_PROFILE_MAX_ROWS:
        meta["profile"] = profile_relation(con, lake.scan_sql(objects))
    if base is not None:
        meta["num_bytes"] += base.num_bytes
    result = _record(name, digest, objects, meta, parents, description, on_record)
    got = result.version.version
    # A concurrent writer took the predicted number (or committed these rows first): the file
    # this commit wrote names the version that lists it. A file others wrote keeps its stamp.
    if got != predicted:
        lake.restamp_object(con, key, stamp, lake.object_metadata(name, got, meta["schema"]))
    return result


def _next_version(name: str) -> int:
    """The number the next version of ``name`` gets unless a concurrent writer takes it."""
    with session_scope(readonly=True) as s:
        top = s.scalar(
            select(func.max(VersionRow.version))
            .join(DatasetRow, DatasetRow.id == VersionRow.dataset_id)
            .where(DatasetRow.name == name)
        )
    return (top or 0) + 1


def commit_query(
    name: str,
    select_sql: str,
    *,
    source: str,
    transform: dict[str, Any],
    parents: Sequence[VersionInfo] = (),
    description: str = "",
    con: duckdb.DuckDBPyConnection | None = None,
) -> CommitResult:
    """Run ``select_sql`` in DuckDB, stage its result as Parquet and commit it (see above)."""
    con = con or lake.connect()
    staged = lake.staging_path()
    # Stamped as it is written (commit_staged checks the stamp and rewrites only on a miss).
    stamp = lake.object_metadata(name, _next_version(name), _describe(con, f"({select_sql})"))
    try:
        lake.copy_to_parquet(con, select_sql, staged, stamp)
        return commit_staged(
            name,
            staged,
            source=source,
            transform=transform,
            parents=parents,
            description=description,
            con=con,
        )
    finally:
        staged.unlink(missing_ok=True)
