"""``engine: ray`` for label specs: labeling functions are row-local, so each block runs them.

Every block runs the DuckDB engine's labeling query (``label._label_sql``) over its rows, with
the row number that the version gives them and the newest human labels (a small table from the
metadata DB, sent to every block). The function statistics (coverage, conflicts) and the
count of rows a human label matched are per-block counts summed on the driver. Same rows, same
order, same lineage record as the DuckDB engine.
"""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa

from aifab.data.catalog import CommitResult, VersionInfo
from aifab.data.clean_steps import RN
from aifab.data.engines import blocks, ray_data
from aifab.data.label import _HUMAN, _human_labels, _label_sql, label_transform
from aifab.data.label_functions import (
    LabelSpec,
    check_functions,
    fires_sql,
    stats_aggregates,
    stats_from_counts,
)
from aifab.data.lake import sql_error, sql_ident


def _keyed(spec: LabelSpec) -> str:
    """A block's rows with ``__row`` (0-based, in the version) and ``__key`` (as text)."""
    key = sql_ident(spec.key) if spec.key else "__row"
    return (
        f"SELECT *, CAST({key} AS VARCHAR) AS __key FROM "
        f"(SELECT * EXCLUDE ({sql_ident(RN)}), {sql_ident(RN)} - 1 AS __row FROM {blocks.BLOCK})"
    )


def _counts_sql(spec: LabelSpec) -> str:
    """One row per block: the counts of ``function_stats``, then rows a human label matches."""
    matched = f"count_if(__key IN (SELECT item_key FROM {_HUMAN}))"
    return (
        f"SELECT {', '.join(stats_aggregates(spec))}, {matched} FROM "
        f"(SELECT __key, {', '.join(fires_sql(spec))} FROM ({_keyed(spec)}) AS k) AS t"
    )


def _stats(ds: Any, spec: LabelSpec, humans: pa.Table) -> dict[str, Any]:
    """``function_stats`` of the whole version, and ``human``: rows a human label matched."""
    per_block = ds.map_batches(
        blocks.run_sql_with,
        batch_size=None,
        batch_format="pyarrow",
        fn_kwargs={"sql": _counts_sql(spec), "tables": {_HUMAN: humans}},
    )
    totals = [0] * (3 + 2 * len(spec.functions))
    for b in ray_data.iter_blocks(per_block):
        for row in b.to_pylist():
            totals = [a + int(v or 0) for a, v in zip(totals, row.values(), strict=True)]
    stats = stats_from_counts(totals[:-1], spec)
    return {**stats, "human": totals[-1] if humans.num_rows else 0}


def label_on_ray(v: VersionInfo, spec: LabelSpec, output: str) -> CommitResult:
    """Label ``v`` on Ray Data and commit the result to ``output`` (see ``aifab.data.label``).

    Raises:
        InvalidInputError: a column that does not exist, a bad regex or SQL rule (as DuckDB's).
    """
    ds, schema = ray_data.read_version(v, RN)
    con = blocks.block_connection()
    try:
        con.register(blocks.BLOCK, schema.empty_table())
        check_functions(con, blocks.BLOCK, v.columns, spec)
    finally:
        con.close()
    humans = _human_labels({v.dataset, output})
    sql = _label_sql(v, spec, humans.num_rows > 0, keyed=_keyed(spec))
    tables = {_HUMAN: humans}
    try:
        out_schema = blocks.run_sql_with(schema.empty_table(), sql, tables).schema
        stats = _stats(ds, spec, humans)
    except duckdb.Error as exc:
        raise sql_error("label spec", exc) from None
    labeled = ds.map_batches(
        blocks.run_sql_with,
        batch_size=None,
        batch_format="pyarrow",
        fn_kwargs={"sql": sql, "tables": tables},
    )
    return ray_data.commit_dataset(
        labeled,
        out_schema,
        output,
        source=f"label({v.ref})",
        transform=label_transform(spec, stats),
        parents=[v],
    )
