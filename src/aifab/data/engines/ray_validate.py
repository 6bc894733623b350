"""``engine: ray`` for expectation suites: the DuckDB engine's rules on Ray Data.

Row rules are row-local except ``unique``: each block runs the same failing-rows query as the
DuckDB engine (``validate.failures_sql``) on DuckDB. A ``unique`` rule needs every row of a
key together, so its repeats are found on a hash shuffle by the key (the same window per
partition, row numbers ordering it) and stand in the block query as a flag column. The failing
rows (few, and quarantined anyway) gather on the driver into the DuckDB engine's failing-rows
table, so counts, examples, quarantine rows and reasons come from the same code. Dataset-level
rules (``row_count``, ``sql: {assert: ...}``, arbitrary SQL) run in DuckDB on the driver, which
streams the version. The passing rows stream in order into one committed object.
"""

from __future__ import annotations

from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aifab.data.catalog import VersionInfo
from aifab.data.clean_steps import RN
from aifab.data.engines import blocks, ray_data
from aifab.data.expectations import ExpectationSuite, RowRule, Unique
from aifab.data.lake import sql_error, sql_ident
from aifab.data.validate import (
    _BASE,
    _FAILED,
    ValidationReport,
    _dataset_results,
    _row_rules,
    failure_results,
    failures_sql,
    judged_report,
    record_commit,
    validate_transform,
)


def _unique_keys(suite: ExpectationSuite) -> dict[str, list[str]]:
    """Rule name -> key columns of every ``unique`` rule."""
    return {
        rule.name: list(e.columns)
        for i, e in enumerate(suite.expectations, start=1)
        if isinstance(e, Unique)
        for rule in e.row_rules(i)
    }


def _repeats(ds: Any, rule: RowRule, keys: list[str], parts: int) -> pa.Array:
    """Row numbers failing a ``unique`` rule: a shuffle puts each key's rows in one block."""
    shuffled = ds.repartition(parts, keys=keys)
    query = (
        f"SELECT rn FROM (SELECT {sql_ident(RN)} AS rn, {rule.fails} AS f "
        f"FROM {blocks.BLOCK}) AS t WHERE f"
    )
    found = [np.zeros(0, dtype=np.int64)]
    for b in ray_data.iter_blocks(ray_data.map_sql(shuffled, query)):
        found.append(b.column(0).to_numpy(zero_copy_only=False).astype(np.int64))
    return pa.array(np.sort(np.concatenate(found)), pa.int64())


def failing_rows(block: pa.Table, sql: str, flags: dict[str, pa.Array]) -> pa.Table:
    """The failing rows of one block: ``flags`` (name -> failing row numbers) become columns."""
    for name, positions in flags.items():
        block = block.append_column(name, pc.is_in(block.column(RN), value_set=positions))
    return blocks.run_sql(block, sql)


def _gather(ds: Any, sql: str, flags: dict[str, pa.Array], schema: pa.Schema) -> Any:
    """A driver-side DuckDB connection holding every block's failing rows as the table."""
    empty = schema.empty_table()
    for name in flags:
        empty = empty.append_column(name, pa.array([], pa.bool_()))
    con = duckdb.connect()
    con.register("__aifab_chunk", blocks.run_sql(empty, sql))
    con.execute(f"CREATE TEMP TABLE {_FAILED} AS SELECT * FROM __aifab_chunk")
    out = ds.map_batches(
        failing_rows,
        batch_size=None,
        batch_format="pyarrow",
        fn_kwargs={"sql": sql, "flags": flags},
    )
    for chunk in ray_data.iter_blocks(out):
        if chunk.num_rows:
            con.register("__aifab_chunk", chunk)
            con.execute(f"INSERT INTO {_FAILED} SELECT * FROM __aifab_chunk")
    con.unregister("__aifab_chunk")
    return con


def _rules(suite: ExpectationSuite, schema: pa.Schema, types: dict[str, str]) -> list[RowRule]:
    """The suite's row rules, bound and checked on an empty block (errors as DuckDB's)."""
    con = blocks.block_connection()
    try:
        con.register(_BASE, schema.empty_table())
        return _row_rules(con, suite, types)
    finally:
        con.close()


def validate_on_ray(
    source: VersionInfo, suite: ExpectationSuite, output: str | None
) -> ValidationReport:
    """Check ``source`` against ``suite`` on Ray Data (semantics: :func:`aifab.data.validate`).

    Returns:
        The report, the DuckDB engine's: same counts, examples, version and quarantine.
    """
    ds, schema = ray_data.read_version(source, RN)
    types = {c: t for c, t in blocks.describe(schema, blocks.BLOCK_SQL).items() if c != RN}
    columns = list(types)
    rules = _rules(suite, schema, types)
    keys = _unique_keys(suite)
    parts = source.num_rows // ray_data.BLOCK_ROWS + 1
    flags = {
        f"__aifab_u{i}": _repeats(ds, r, keys[r.name], parts)
        for i, r in enumerate(rules)
        if r.kind == "unique"
    }
    fails = [f"__aifab_u{i}" if r.kind == "unique" else r.fails for i, r in enumerate(rules)]
    sql = failures_sql(rules, columns, blocks.BLOCK, fails)
    con = _gather(ds, sql, flags, schema) if rules else None
    try:
        found = failure_results(con, rules, suite.examples) if con else (0, 0, [])
        found[2].extend(_dataset_results(source, suite))
        report, commit = judged_report(source, suite, found, output)
        if not commit:
            return report
        dropped = (
            con.execute(f"SELECT rn FROM {_FAILED} WHERE __err ORDER BY rn").fetchnumpy()["rn"]
            if con
            else np.zeros(0, dtype=np.int64)
        )
        kept = ds.map_batches(
            blocks.drop_positions,
            batch_size=None,
            batch_format="pyarrow",
            fn_kwargs={"column": RN, "positions": pa.array(dropped, pa.int64())},
        )
        final = f"SELECT {', '.join(sql_ident(c) for c in columns)} FROM {blocks.BLOCK}"
        result = ray_data.commit_dataset(
            ray_data.map_sql(kept, final),
            blocks.run_sql(schema.empty_table(), final).schema,
            output or source.dataset,
            source=f"validate({source.ref})",
            transform=validate_transform(suite, report),
            parents=[source],
        )
        if con is not None:
            record_commit(report, result, con, rules, source)
        else:
            report.version, report.created = result.version, result.created
        return report
    except duckdb.Error as exc:
        raise sql_error(f"validate {source.ref}", exc) from None
    finally:
        if con is not None:
            con.close()
