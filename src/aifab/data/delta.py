"""Publish dataset versions as a Delta Lake table (``deltalake``: no JVM), for other engines.

Delta table versions follow aifab's: each published aifab version is one Delta commit (its
commit info carries ``aifab.dataset`` and ``aifab.version``), in aifab's order. The table's data
files are copies of the lake's Parquet objects (reflinks where the filesystem shares blocks on
write, full copies elsewhere), never hard links: a table belongs to its readers, and a write to
one of its files must not change the lake's only copy. For the same reason a table inside the
workspace is refused. DuckDB, polars, pandas and Spark read the table as is; time travel to
Delta version k is aifab version ``published[k]``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from aifab.core.errors import InvalidInputError
from aifab.core.extras import require
from aifab.core.settings import get_settings
from aifab.core.storage import get_store
from aifab.data import lake
from aifab.data.catalog import VersionInfo, list_versions, resolve

__all__ = ["delta_versions", "publish_delta"]

_DATASET_KEY = "aifab.dataset"
_VERSION_KEY = "aifab.version"


_FICLONE = 0x40049409  # linux/fs.h: share the source's blocks, copy-on-write


def _local(uri: str) -> Path:
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else uri).expanduser().resolve()
    raise InvalidInputError(f"{uri}: only local paths and file:// URIs can be published to yet")


def _refuse_inside_workspace(path: Path) -> None:
    """A table in the workspace (its root, the lake, any folder of it) is refused."""
    roots = {get_settings().resolved_home}
    store = get_store()
    if store.is_local:
        roots.add(Path(store.root).expanduser().resolve())
    for root in roots:
        if path.is_relative_to(root):
            raise InvalidInputError(
                f"{path}: inside the workspace {root}; publish the table outside it"
            )


def delta_versions(uri: str) -> list[tuple[int, str, int]]:
    """``(delta version, dataset, aifab version)`` of each commit aifab made to the table.

    Empty when there is no table at ``uri``.
    """
    deltalake = require("deltalake", "Delta Lake publishing")
    path = _local(uri)
    if not (path / "_delta_log").is_dir():
        return []
    out = []
    for commit in deltalake.DeltaTable(str(path)).history():
        if _VERSION_KEY in commit:
            out.append(
                (int(commit["version"]), str(commit[_DATASET_KEY]), int(commit[_VERSION_KEY]))
            )
    return sorted(out)


def _to_publish(ref: str, history: bool, done: list[tuple[int, str, int]]) -> list[VersionInfo]:
    name = ref.split("@", 1)[0]
    if done and done[-1][1] != name:
        raise InvalidInputError(f"the Delta table holds dataset {done[-1][1]!r}, not {name!r}")
    last = done[-1][2] if done else 0
    if history:
        if "@" in ref:
            raise InvalidInputError("--history publishes every version: give NAME, not NAME@V")
        return [v for v in list_versions(name) if v.version > last]
    version = resolve(ref)
    if version.version < last:
        raise InvalidInputError(
            f"{version.ref} is older than {name}@{last}, which the table already holds: Delta "
            "versions follow aifab's, in order"
        )
    return [] if version.version == last else [version]


def _arrow_schema(files: list[Path]) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schemas = [pq.read_schema(f).remove_metadata() for f in files]
    return pa.unify_schemas(schemas) if schemas else pa.schema([])


def _copy(source: Path, target: Path) -> None:
    """Copy a lake object into the table: a reflink where the filesystem has them, else bytes.

    Written under a temporary name and renamed, so a crash leaves no half file under the name.
    """
    if target.exists():
        return  # a name is one object's digest: the same bytes
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with open(source, "rb") as src, open(partial, "wb") as dst:
            try:
                fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())
            except OSError:  # no reflinks here (ext4, tmpfs, across filesystems): copy bytes
                shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _commit(path: Path, version: VersionInfo, active: set[str]) -> int:
    """Write one aifab version as the table's next commit; its Delta version."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable
    from deltalake.schema import Schema
    from deltalake.transaction import (
        AddAction,
        CommitProperties,
        RemoveAction,
        create_table_with_add_actions,
    )

    files = [lake.object_path(key) for key in version.objects]
    adds = []
    for source in files:
        # A file active now cannot be added again in an overwrite: copy it under a new name.
        name = source.name if source.name not in active else f"v{version.version}-{source.name}"
        _copy(source, path / name)
        stats = json.dumps({"numRecords": pq.read_metadata(source).num_rows})
        mtime = int(time.time() * 1000)
        adds.append(AddAction(name, source.stat().st_size, {}, mtime, True, stats))
    schema = Schema.from_arrow(_arrow_schema(files))
    meta = CommitProperties(
        custom_metadata={_DATASET_KEY: version.dataset, _VERSION_KEY: str(version.version)}
    )
    if not (path / "_delta_log").is_dir():
        create_table_with_add_actions(
            str(path), schema, adds, name=version.dataset, commit_properties=meta
        )
    else:
        # Overwrite: the commit holds exactly this version's objects (and its schema).
        DeltaTable(str(path)).create_write_transaction(
            list[AddAction | RemoveAction](adds),
            mode="overwrite",
            schema=schema,
            commit_properties=meta,
        )
    return int(DeltaTable(str(path)).version())


def publish_delta(ref: str, uri: str, *, history: bool = False) -> dict[str, Any]:
    """Publish dataset version(s) as commits of the Delta Lake table at ``uri``.

    Args:
        ref: ``NAME@VERSION``, or ``NAME`` for its latest version.
        uri: a local directory or ``file://`` URI; the table is created there if new.
        history: publish every version of ``NAME`` the table does not hold yet, in order.

    Returns:
        ``{"uri", "published": [{"ref", "delta_version"}], "versions": [...]}``: what this call
        committed, and every ``(delta version, aifab ref)`` the table holds.

    Raises:
        InvalidInputError: a remote URI, a directory inside the workspace, another dataset's
            table, or a version older than the table's newest (Delta versions follow aifab's
            order).
    """
    require("deltalake", "Delta Lake publishing")
    path = _local(uri)
    _refuse_inside_workspace(path)
    done = delta_versions(str(path))
    todo = _to_publish(ref, history, done)
    path.mkdir(parents=True, exist_ok=True)
    published = []
    for version in todo:
        from deltalake import DeltaTable

        active = (
            {Path(f).name for f in DeltaTable(str(path)).file_uris()}
            if (path / "_delta_log").is_dir()
            else set()
        )
        delta_version = _commit(path, version, active)
        published.append({"ref": version.ref, "delta_version": delta_version})
    held = [{"delta_version": d, "ref": f"{n}@{v}"} for d, n, v in delta_versions(str(path))]
    return {"uri": str(path), "published": published, "versions": held}
