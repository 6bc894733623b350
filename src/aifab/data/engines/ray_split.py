"""``engine: ray`` for split specs: the DuckDB engine's hash ranking as distributed selection.

The DuckDB engine ranks the rows of each group (the whole table for ``random``, each class of
``by`` for ``stratified``) by ``hash(row number, seed)``, row number breaking ties, and cuts
the ranking at ``floor(n * fraction + 0.5)``. Only two keys per group matter: the ones at the
train and valid cuts. They are found without sorting the table: each block counts its rows
per group and per bin of the hash's top 12 bits; the driver sums the counts, finds the bin
holding each cut's rank, and gathers just those bins' keys (about n / 4096 per cut) to pick
the key at the rank. A last row-local pass compares each row's key with its group's cuts.
Rows keep their order; the sizes, rows and lineage record equal the DuckDB engine's.
``time`` splits (a rank over arbitrary types, with ties kept together) run on DuckDB only.
"""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa

from aifab.core.errors import InvalidInputError
from aifab.data.catalog import CommitResult, VersionInfo
from aifab.data.clean_steps import RN
from aifab.data.engines import blocks, ray_data
from aifab.data.lake import sql_error, sql_ident
from aifab.data.splits import SPLIT_COLUMN, SplitSpec, _counts, _cuts, class_counts

_H, _G, _CUTS = "__aifab_h", "__aifab_g", "__aifab_cuts"
#: Bits of the hash that name a bin (4096 bins).
_SHIFT = 52


def _prepare_sql(spec: SplitSpec) -> str:
    """Each row's ranking key (the DuckDB engine's ``hash(row, seed)``) and group."""
    group = sql_ident(spec.by) if spec.method == "stratified" and spec.by else "0"
    return (
        f"SELECT *, hash({sql_ident(RN)}, {int(spec.seed)}::BIGINT) AS {_H}, "
        f"{group} AS {_G} FROM {blocks.BLOCK}"
    )


def _with_cuts(block: pa.Table, sql: str, table: pa.Table) -> pa.Table:
    """``sql`` on one block, with the driver's small ``table`` readable as ``__aifab_cuts``."""
    return blocks.run_sql_with(block, sql, {_CUTS: table})


def _collect(ds: Any) -> pa.Table | None:
    tables = [b for b in ray_data.iter_blocks(ds) if b.num_rows]
    return pa.concat_tables(tables) if tables else None


def _targets(con: duckdb.DuckDBPyConnection, spec: SplitSpec) -> None:
    """``targets(g, cut, k, bin)``: each cut's bin and its rank within the bin."""
    c1, c2 = _cuts(spec)
    con.execute(
        "CREATE TEMP TABLE binned AS SELECT g, bin, n, "
        "sum(n) OVER (PARTITION BY g ORDER BY bin) - n AS before, "
        "sum(n) OVER (PARTITION BY g) AS total FROM "
        "(SELECT g, bin, sum(n)::BIGINT AS n FROM hist GROUP BY ALL)"
    )
    # The cut ranks as the DuckDB engine computes them (the same expression, in DuckDB).
    con.execute(
        "CREATE TEMP TABLE targets AS WITH r AS ("
        f"SELECT g, 'a' AS cut, floor(total * '{c1!r}'::DOUBLE + 0.5)::BIGINT AS r "
        "FROM (SELECT DISTINCT g, total FROM binned) UNION ALL "
        f"SELECT g, 'b', floor(total * '{c2!r}'::DOUBLE + 0.5)::BIGINT "
        "FROM (SELECT DISTINCT g, total FROM binned)) "
        "SELECT r.g, r.cut, r.r - b.before AS k, b.bin FROM r JOIN binned AS b "
        "ON r.g IS NOT DISTINCT FROM b.g AND r.r >= b.before AND r.r < b.before + b.n"
    )


def _cut_keys(ds: Any, prepared: str, spec: SplitSpec) -> tuple[pa.Table, list[tuple[Any, int]]]:
    """Per group, the key ``(hash, row)`` at each cut (none: past the group's end).

    Returns:
        The cuts table ``(g, ah, ar, bh, br)`` and ``(group, rows)`` pairs.
    """
    hist_sql = (
        f"SELECT {_G} AS g, {_H} >> {_SHIFT} AS bin, count(*) AS n FROM ({prepared}) AS t "
        "GROUP BY ALL"
    )
    con = duckdb.connect()
    try:
        hist = _collect(ray_data.map_sql(ds, hist_sql))
        assert hist is not None  # split() refuses a version without rows
        con.register("hist", hist)
        _targets(con, spec)
        targets = con.sql("SELECT DISTINCT g, bin FROM targets").to_arrow_table()
        gather_sql = (
            f"SELECT {_G} AS g, {_H} AS h, {sql_ident(RN)} AS rn FROM ({prepared}) AS p "
            f"WHERE EXISTS (SELECT 1 FROM {_CUTS} AS t WHERE t.g IS NOT DISTINCT FROM p.{_G} "
            f"AND t.bin = p.{_H} >> {_SHIFT})"
        )
        gathered = ds.map_batches(
            _with_cuts,
            batch_size=None,
            batch_format="pyarrow",
            fn_kwargs={"sql": gather_sql, "table": targets},
        )
        keys = _collect(gathered) if targets.num_rows else None
        if keys is None:  # every cut is past its group's end (a fraction of 1)
            empty = "SELECT g, 0::UBIGINT AS h, 0::BIGINT AS rn FROM hist LIMIT 0"
            keys = con.sql(empty).to_arrow_table()
        con.register("keys", keys)
        cuts = con.sql(
            "WITH ranked AS (SELECT g, h, rn, row_number() OVER "
            f"(PARTITION BY g, h >> {_SHIFT} ORDER BY h, rn) - 1 AS k FROM keys), "
            "picked AS (SELECT t.g, t.cut, x.h, x.rn FROM targets AS t JOIN ranked AS x "
            f"ON t.g IS NOT DISTINCT FROM x.g AND t.bin = x.h >> {_SHIFT} AND t.k = x.k) "
            "SELECT g, max(h) FILTER (cut = 'a') AS ah, max(rn) FILTER (cut = 'a') AS ar, "
            "max(h) FILTER (cut = 'b') AS bh, max(rn) FILTER (cut = 'b') AS br "
            "FROM picked GROUP BY g"
        ).to_arrow_table()
        groups = con.execute(
            "SELECT CAST(g AS VARCHAR), any_value(total) FROM binned GROUP BY g "
            "ORDER BY 1 NULLS FIRST"
        ).fetchall()
        return cuts, [(g, int(n)) for g, n in groups]
    finally:
        con.close()


def _assign_sql(prepared: str, columns: list[str]) -> str:
    """Each row's split from its group's cut keys, in block order."""
    keep = ", ".join(f"b.{sql_ident(c)}" for c in columns if c != SPLIT_COLUMN)
    before = "coalesce(b.{h} < c.{x}h OR (b.{h} = c.{x}h AND b.{rn} < c.{x}r), TRUE)"
    fmt = {"h": _H, "rn": sql_ident(RN)}
    return (
        f"SELECT {keep}, CASE WHEN {before.format(x='a', **fmt)} THEN 'train' "
        f"WHEN {before.format(x='b', **fmt)} THEN 'valid' ELSE 'test' END "
        f"AS {sql_ident(SPLIT_COLUMN)} FROM ({prepared}) AS b LEFT JOIN {_CUTS} AS c "
        f"ON b.{_G} IS NOT DISTINCT FROM c.g ORDER BY b.{sql_ident(RN)}"
    )


def split_on_ray(source: VersionInfo, spec: SplitSpec, output: str) -> CommitResult:
    """Add the ``split`` column to ``source`` on Ray Data and commit it to ``output``.

    Raises:
        InvalidInputError: a ``time`` split, or a class with one row (as DuckDB's).
    """
    if spec.method == "time":
        raise InvalidInputError(
            "split spec: method 'time' runs on the duckdb engine only (engine: ray splits "
            "random and stratified)"
        )
    ds, schema = ray_data.read_version(source, RN)
    prepared = _prepare_sql(spec)
    try:
        blocks.describe(schema, prepared)
        cuts, groups = _cut_keys(ds, prepared, spec)
    except duckdb.Error as exc:
        raise sql_error("split spec", exc) from None
    counts: Any = (
        class_counts(groups, spec)
        if spec.method == "stratified"
        else _counts(source.num_rows, spec)
    )
    columns = [c for c in schema.names if c != RN]
    assign = _assign_sql(prepared, columns)
    empty = _with_cuts(schema.empty_table(), assign, cuts)
    out = ds.map_batches(
        _with_cuts,
        batch_size=None,
        batch_format="pyarrow",
        fn_kwargs={"sql": assign, "table": cuts},
    )
    transform = {"kind": "split", "spec": spec.model_dump(mode="json"), "counts": counts}
    return ray_data.commit_dataset(
        out,
        empty.schema,
        output,
        source=f"split({source.ref})",
        transform=transform,
        parents=[source],
    )
