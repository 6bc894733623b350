"""Ray Data plumbing of the Ray engine: session, reading, block SQL, the streamed commit.

A version is read as a dataset of row-group blocks; the result streams into one staged
object that is committed as the DuckDB engine commits.

Ray is imported inside the functions (``aifab --help`` must not pay for it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from aifab.core.storage import get_store
from aifab.data import lake
from aifab.data.catalog import CommitResult, VersionInfo, commit_staged
from aifab.data.engines import blocks

#: Rows per row group of the object written (the DuckDB engine's COPY uses the same).
ROW_GROUP = 122880
#: Rows per block read (at most; a block never spans two row groups). Tests lower it to get
#: several blocks from a small table.
BLOCK_ROWS = ROW_GROUP


def ray_session() -> Any:
    """The Ray module, connected: to ``RAY_ADDRESS`` when set, else a local instance.

    Output order matters (versions are ordered), so the streaming executor keeps block order.
    """
    from aifab.core.extras import require

    ray = require("ray", "the ray data engine")
    if not ray.is_initialized():
        ray.init(
            address=os.environ.get("RAY_ADDRESS") or None,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,  # not "Started a local Ray instance." on stderr
        )
    _quiet_console(ray)
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    return ray


class _NoProgressNotice(logging.Filter):
    """Drops Ray Data's notice that progress bars are off: aifab turned them off on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Progress bars disabled")


def _quiet_console(ray: Any) -> None:
    """Ray Data's console shows warnings only; its own log file keeps everything.

    Importing ``ray.data`` installs its logging config (every execution plan at INFO on
    stderr: some 37 lines for a 1,000-row pipeline), so the console handler is turned down
    after the import, not before.
    """
    ray.data  # noqa: B018 - the import that configures Ray Data's logger
    for handler in logging.getLogger("ray.data").handlers:
        if handler.get_name() == "console":
            handler.setLevel(logging.WARNING)
            if not any(isinstance(f, _NoProgressNotice) for f in handler.filters):
                handler.addFilter(_NoProgressNotice())


def _read_block(batch: pa.Table, rn: str | None) -> pa.Table:
    return pa.concat_tables([blocks.read_block(task, rn) for task in batch.to_pylist()])


def read_version(source: VersionInfo, rn: str | None) -> tuple[Any, pa.Schema]:
    """A Ray dataset of ``source``'s rows, one block per Parquet row group, in order.

    Each worker reads its row group itself (only the task list passes through the driver), so
    the table never has to fit in the object store. With an object store the tasks name the
    objects' keys on it and the workers read them from the store (with their own environment's
    credentials); the driver reads only footers. With ``rn`` each row carries its 1-based
    position in the version under that name (the DuckDB engine's ``row_number()``).

    Returns:
        The dataset and its Arrow schema.
    """
    ray = ray_session()
    store = get_store()
    if store.is_local:
        files, uri = [str(lake.object_path(k)) for k in source.objects], None
    else:
        files, uri = [store.path(f"lake/{k}") for k in source.objects], store.uri
    tasks = blocks.read_tasks(files, BLOCK_ROWS, uri)
    schema = pa.schema([])
    if files:
        with blocks.open_object(files[0], uri) as first:
            schema = pq.read_schema(first).remove_metadata()
    if rn is not None:
        schema = schema.append(pa.field(rn, pa.int64()))
    if not tasks:
        return ray.data.from_arrow(schema.empty_table()), schema
    ds = ray.data.from_items(tasks, override_num_blocks=len(tasks))
    ds = ds.map_batches(_read_block, batch_size=1, batch_format="pyarrow", fn_kwargs={"rn": rn})
    return ds, schema


def map_sql(ds: Any, sql: str, udfs: Sequence[str] = ()) -> Any:
    """``ds`` with every block replaced by ``sql`` (written over :data:`blocks.BLOCK`) on it."""
    return ds.map_batches(
        blocks.run_sql,
        batch_size=None,
        batch_format="pyarrow",
        zero_copy_batch=True,
        fn_kwargs={"sql": sql, "udfs": tuple(udfs)},
    )


def iter_blocks(ds: Any) -> Any:
    """The blocks of ``ds`` as Arrow tables, in order, streamed to the driver."""
    return ds.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=1)


def _stamp(name: str, schema: pa.Schema) -> dict[str, str]:
    from aifab.data.catalog import _next_version

    types = blocks.describe(schema, blocks.BLOCK_SQL)
    columns = [{"name": n, "type": t} for n, t in types.items()]
    return lake.object_metadata(name, _next_version(name), columns)


def commit_dataset(
    ds: Any,
    schema: pa.Schema,
    name: str,
    *,
    source: str,
    transform: dict[str, Any],
    parents: Sequence[VersionInfo],
) -> CommitResult:
    """Stream ``ds`` (blocks of ``schema``) into one staged object and commit it as a version.

    The blocks arrive in order and are written as they come (bounded memory on the driver);
    the commit is the DuckDB engine's (:func:`aifab.data.catalog.commit_staged`), so the
    content hash, the object key and the lineage are computed the same way.
    """
    staged: Path = lake.staging_path()
    schema = schema.with_metadata(_stamp(name, schema))
    try:
        with pq.ParquetWriter(staged, schema, compression="zstd") as writer:
            for block in iter_blocks(ds):
                if block.num_rows:
                    writer.write_table(block.cast(schema), row_group_size=ROW_GROUP)
        return commit_staged(
            name, staged, source=source, transform=transform, parents=list(parents)
        )
    finally:
        staged.unlink(missing_ok=True)
