"""``engine: ray`` for clean specs: the DuckDB engine's steps on Ray Data.

Row-local steps compile, with the same SQL builders (``clean_steps``), into one query that
DuckDB runs on each block (a row group of the input). Steps that need the whole table run as
distributed passes: statistics (``ray_stats``), exact duplicates (a hash shuffle on the key,
then the same ``QUALIFY`` per partition), cast failures (gathered for the quarantine) and
near-duplicates (MinHash over the rows in order, as the DuckDB engine does). The result is
streamed into one object and committed like the DuckDB engine's: same rows, same order, same
quarantine, same lineage (the spec records ``engine: ray``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

from aifab.core.errors import InvalidInputError
from aifab.data import clean_steps as cs
from aifab.data.catalog import CommitResult, VersionInfo
from aifab.data.clean import CleanSpec, check_columns
from aifab.data.clean import _json_value as json_value
from aifab.data.engines import blocks, ray_data, ray_stats
from aifab.data.lake import sql_error, sql_ident, sql_string
from aifab.data.pii import CARD_UDF
from aifab.data.quarantine import QuarantineItem
from aifab.data.sandbox import check_expression

RN = cs.RN


@dataclass
class _Run:
    """The plan while it compiles: a dataset, and row-local SQL still to run on its blocks."""

    ds: Any
    schema: pa.Schema
    #: Blocks of the input (the partitions of a shuffle).
    parts: int
    sql: str = blocks.BLOCK_SQL
    types: dict[str, str] = field(default_factory=dict)
    udfs: list[str] = field(default_factory=list)
    reordered: bool = False
    #: The plan holds a shuffle too costly to run again for each statistics pass.
    costly: bool = False
    rejected: list[QuarantineItem] = field(default_factory=list)

    def describe(self, where: str) -> None:
        try:
            types = blocks.describe(self.schema, self.sql, self.udfs)
        except duckdb.Error as exc:
            raise sql_error(where, exc) from None
        self.types = {c: t for c, t in types.items() if c != RN}

    def flush(self) -> Any:
        """Run the pending SQL on every block (lazily); the dataset of the rows so far."""
        if self.sql != blocks.BLOCK_SQL:
            self.schema = blocks.run_sql(self.schema.empty_table(), self.sql, self.udfs).schema
            self.ds = ray_data.map_sql(self.ds, self.sql, self.udfs)
            self.sql = blocks.BLOCK_SQL
        return self.ds

    def settle(self) -> Any:
        """Before passes over the rows so far: keep them if recomputing means another shuffle.

        Ray spills them to disk past the object store's limit.
        """
        ds = self.flush()
        if self.costly:
            self.ds = ds = ds.materialize()
            self.costly = False
        return ds

    def in_order(self) -> Any:
        """The rows so far in input order (sorted back after a shuffle)."""
        ds = self.flush()
        if self.reordered:
            self.ds = ds = ds.sort(RN)
            self.reordered = False
        return ds

    def replace(self, exprs: dict[str, str]) -> None:
        self.sql = cs.replace_columns(self.sql, list(self.types), exprs, True)


def _check_value(value: Any, col_type: str, column: str, where: str) -> None:
    con = blocks.block_connection()
    try:
        got = con.execute(f"SELECT TRY_CAST({cs.sql_literal(value)} AS {col_type})").fetchone()
    except duckdb.Error as exc:
        raise sql_error(where, exc) from None
    finally:
        con.close()
    if got is None or got[0] is None:
        raise InvalidInputError(f"{where}: {value!r} is not a valid {col_type} for {column!r}")


def _drop_duplicates(r: _Run, s: cs.DropDuplicates, where: str) -> dict[str, Any]:
    subset = s.subset or list(r.types)
    check_columns(where, r.types, subset)
    # A hash shuffle puts every row of one key in one block; DuckDB keeps the first per block.
    ds = r.flush().repartition(r.parts, keys=subset)
    r.ds = ray_data.map_sql(ds, cs.drop_duplicates_sql(blocks.BLOCK_SQL, subset))
    r.reordered = r.costly = True
    return {"subset": subset}


def _drop_near_duplicates(r: _Run, s: cs.DropNearDuplicates, where: str) -> dict[str, Any]:
    import numpy as np

    from aifab.data.dedup import NearDuplicateFinder

    check_columns(where, r.types, [s.column], "string")
    finder = NearDuplicateFinder(
        s.threshold, unit=s.shingle, size=s.size, num_perm=s.num_perm, seed=s.seed
    )
    # "A near-duplicate of an earlier kept row" is sequential: the text streams through the
    # driver in row order, as in the DuckDB engine; only the dropped positions go back.
    r.settle()
    ds = r.in_order().select_columns([RN, s.column])
    dropped = [np.zeros(0, dtype=np.int64)]
    for b in ray_data.iter_blocks(ds):
        rns = b.column(0).to_numpy()
        dropped.append(rns[finder.duplicates(b.column(1).to_pylist())])
    rows = np.concatenate(dropped)
    r.ds = r.ds.map_batches(
        blocks.drop_positions,
        batch_size=None,
        batch_format="pyarrow",
        fn_kwargs={"column": RN, "positions": pa.array(rows, pa.int64())},
    )
    r.costly = True
    return {"dropped": len(rows), "lsh_bands": finder.bands, "lsh_rows": finder.rows}


def _drop_nulls(r: _Run, s: cs.DropNulls, where: str) -> dict[str, Any]:
    columns = s.columns or list(r.types)
    check_columns(where, r.types, columns)
    r.sql = cs.drop_nulls_sql(r.sql, columns, s.how)
    return {"columns": columns}


def _fill_nulls(r: _Run, s: cs.FillNulls, where: str) -> dict[str, Any]:
    check_columns(where, r.types, s.values)
    for c, how in s.strategy.items():
        check_columns(where, r.types, [c], "" if how == "mode" else "numeric")
    for c, v in s.values.items():
        _check_value(v, r.types[c], c, where)
    fills: dict[str, Any] = dict(s.values)
    if s.strategy:
        ds = r.settle()
        for c, how in s.strategy.items():
            if how == "mean":
                fills[c] = ray_stats.mean(ds, c)
            elif how == "median":
                fills[c] = ray_stats.quantiles(ds, c, [0.5])[0]
            else:
                fills[c] = ray_stats.mode(ds, c, RN)
    exprs = {c: cs.fill_expr(c, r.types[c], v) for c, v in fills.items() if v is not None}
    r.replace(exprs)
    return {"filled_with": {c: json_value(v) for c, v in fills.items()}}


def _cast(r: _Run, s: cs.Cast, where: str) -> dict[str, Any]:
    check_columns(where, r.types, s.columns)
    con = blocks.block_connection()
    try:
        for c, t in s.columns.items():
            try:
                con.execute(f"DESCRIBE SELECT CAST(NULL AS {t})").fetchall()
            except duckdb.Error:
                raise InvalidInputError(f"{where}: unknown type {t!r} for column {c!r}") from None
    finally:
        con.close()
    r.settle()
    fails = [cs.cast_failure_sql(c, t) for c, t in s.columns.items()]
    record = "{" + ", ".join(f"{sql_string(c)}: {sql_ident(c)}" for c in r.types) + "}"
    query = (
        f"SELECT {sql_ident(RN)} AS rn, to_json({record}) AS rec, "
        + ", ".join(f"{f} AS f{i}" for i, f in enumerate(fails))
        + f" FROM ({r.sql}) AS t WHERE {' OR '.join(fails)}"
    )
    found = []
    for b in ray_data.iter_blocks(ray_data.map_sql(r.ds, query, r.udfs)):
        found.extend(b.to_pylist())
    found.sort(key=lambda row: row["rn"])
    for row in found:
        rec = json.loads(row["rec"])
        for i, (c, t) in enumerate(s.columns.items()):
            if row[f"f{i}"]:
                r.rejected.append(
                    QuarantineItem(
                        f"cast:{c}", f"{c}={rec[c]!r} cannot be cast to {t}", rec, int(row["rn"])
                    )
                )
    if found:
        r.sql = f"SELECT * FROM ({r.sql}) AS t WHERE NOT ({' OR '.join(fails)})"
    r.replace({c: f"TRY_CAST({sql_ident(c)} AS {t})" for c, t in s.columns.items()})
    return {"quarantined": len(found)}


def _rename(r: _Run, s: cs.Rename, where: str) -> dict[str, Any]:
    check_columns(where, r.types, s.columns)
    names = [s.columns.get(c, c) for c in r.types]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise InvalidInputError(f"{where}: renaming gives two columns named {clash[0]!r}")
    r.sql = cs.project(r.sql, [(sql_ident(c), s.columns.get(c, c)) for c in r.types], True)
    return {}


def _filter(r: _Run, s: cs.Filter, where: str) -> dict[str, Any]:
    r.sql = cs.where_sql(r.sql, check_expression(s.where, where))
    return {}


def _clip(r: _Run, s: cs.Clip, where: str) -> dict[str, Any]:
    check_columns(where, r.types, s.columns, "numeric")
    bounds = {c: (s.lower, s.upper) for c in s.columns}
    qs = [q for q in (s.lower_quantile, s.upper_quantile) if q is not None]
    if qs:
        ds = r.settle()
        for c in s.columns:
            v = ray_stats.quantiles(ds, c, qs)
            lo = v[0] if s.lower_quantile is not None else None
            hi = v[-1] if s.upper_quantile is not None else None
            bounds[c] = (lo, hi)
    exprs = {
        c: cs.clip_expr(c, r.types[c], lo, hi)
        for c, (lo, hi) in bounds.items()
        if lo is not None or hi is not None
    }
    r.replace(exprs)
    return {"bounds": {c: [json_value(lo), json_value(hi)] for c, (lo, hi) in bounds.items()}}


def _regex_replace(r: _Run, s: cs.RegexReplace, where: str) -> dict[str, Any]:
    check_columns(where, r.types, [s.column], "string")
    con = blocks.block_connection()
    try:
        con.execute(f"SELECT regexp_matches('', {sql_string(s.pattern)})")
    except duckdb.Error as exc:
        raise sql_error(f"{where}: pattern", exc) from None
    finally:
        con.close()
    r.replace({s.column: cs.regex_replace_expr(s)})
    return {}


def _normalize_text(r: _Run, s: cs.NormalizeText, where: str) -> dict[str, Any]:
    check_columns(where, r.types, s.columns, "string")
    if s.unicode == "nfkc" and blocks.NFKC_UDF not in r.udfs:
        r.udfs.append(blocks.NFKC_UDF)
    r.replace({c: cs.normalize_expr(c, s, blocks.NFKC_UDF) for c in s.columns})
    return {}


def _redact_pii(r: _Run, s: cs.RedactPii, where: str) -> dict[str, Any]:
    check_columns(where, r.types, s.columns, "string")
    if s.luhn and "card" in s.kinds and CARD_UDF not in r.udfs:
        r.udfs.append(CARD_UDF)
    r.replace({c: cs.redact_expr(c, s) for c in s.columns})
    return {}


_HANDLERS: dict[type, Callable[[_Run, Any, str], dict[str, Any]]] = {
    cs.DropDuplicates: _drop_duplicates,
    cs.DropNearDuplicates: _drop_near_duplicates,
    cs.DropNulls: _drop_nulls,
    cs.FillNulls: _fill_nulls,
    cs.Cast: _cast,
    cs.Rename: _rename,
    cs.Filter: _filter,
    cs.Clip: _clip,
    cs.RegexReplace: _regex_replace,
    cs.NormalizeText: _normalize_text,
    cs.RedactPii: _redact_pii,
}


def clean_on_ray(
    source: VersionInfo, spec: CleanSpec, output: str
) -> tuple[CommitResult, list[QuarantineItem]]:
    """Run ``spec`` over ``source`` on Ray Data and commit the result to ``output``.

    Returns:
        The commit and the rows to quarantine (the caller records them, as for DuckDB).
    """
    ds, schema = ray_data.read_version(source, RN)
    run = _Run(ds, schema, parts=source.num_rows // ray_data.BLOCK_ROWS + 1)
    run.describe(source.ref)
    infos = []
    for i, step in enumerate(spec.steps, start=1):
        where = f"step {i} ({step.op})"
        info = {"step": i, "op": step.op, **_HANDLERS[type(step)](run, step, where)}
        run.describe(where)
        if spec.stats:
            info["rows"] = run.settle().count()
        infos.append(info)
    columns = ", ".join(sql_ident(c) for c in run.types)
    ds = run.in_order()
    final = f"SELECT {columns} FROM ({blocks.BLOCK_SQL}) AS t"
    out_schema = blocks.run_sql(run.schema.empty_table(), final).schema
    transform = {"kind": "clean", "spec": spec.to_yaml_dict(), "steps": infos}
    result = ray_data.commit_dataset(
        ray_data.map_sql(ds, final),
        out_schema,
        output,
        source=f"clean({source.ref})",
        transform=transform,
        parents=[source],
    )
    return result, run.rejected
