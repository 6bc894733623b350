"""Declarative cleaning: YAML steps compiled into one DuckDB query and committed as a version.

Consecutive SQL steps nest into a single ``COPY``; only steps that need statistics (quantiles,
means), cast-failure quarantine or near-duplicate detection run an extra pass before it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from duckdb.func import PythonUDFType
from pydantic import Field

from aifab.core.config import StrictConfig, as_config
from aifab.core.errors import InvalidInputError
from aifab.data import clean_steps as cs
from aifab.data import lake
from aifab.data.catalog import CommitResult, VersionInfo, commit_query, resolve
from aifab.data.engines import Engine
from aifab.data.lake import sql_error, sql_ident, sql_string
from aifab.data.pii import CARD_UDF, register_functions
from aifab.data.profile import kind_of
from aifab.data.quarantine import QuarantineItem, quarantine
from aifab.data.sandbox import check_expression

_NFKC_UDF = "aifab_nfkc"
#: Steps that need each row's position in the input version.
_NEEDS_RN = (cs.DropDuplicates, cs.DropNearDuplicates, cs.Cast)
_STREAM_BATCH = 1 << 16


class CleanSpec(StrictConfig):
    """A cleaning recipe: steps applied in order, each one YAML key (see ``clean_steps``).

    Example::

        steps:
          - drop_duplicates: {subset: [id]}
          - drop_near_duplicates: {column: text, threshold: 0.85}
          - cast: {columns: {age: INTEGER}}
          - fill_nulls: {values: {age: 0}, strategy: {income: median}}
          - filter: {where: "age >= 0"}
          - clip: {columns: [income], lower_quantile: 0.01, upper_quantile: 0.99}
          - redact_pii: {columns: [notes], kinds: [email, phone, card, id]}
    """

    steps: list[cs.Step] = Field(min_length=1, description="Steps, applied in order.")
    stats: bool = Field(False, description="Count rows after every step (one pass per step).")
    engine: Engine = Field(
        "duckdb", description="duckdb (in-process) or ray (Ray Data, for tables beyond one node)."
    )

    def to_yaml_dict(self) -> dict[str, Any]:
        """The spec in its YAML shape (one key per step), JSON-ready."""
        steps = [{s.op: s.model_dump(mode="json", exclude={"op"})} for s in self.steps]
        engine = {} if self.engine == "duckdb" else {"engine": self.engine}
        return {"steps": steps, "stats": self.stats, **engine}


def describe(con: duckdb.DuckDBPyConnection, sql: str, where: str) -> dict[str, str]:
    """Column name -> DuckDB type of a query (planning only), without the hidden row number."""
    try:
        rows = con.execute(f"DESCRIBE SELECT * FROM ({sql}) AS t").fetchall()
    except duckdb.Error as exc:
        raise sql_error(where, exc) from None
    return {name: col_type for name, col_type, *_ in rows if name != cs.RN}


def fetch(con: duckdb.DuckDBPyConnection, sql: str, where: str) -> list[tuple[Any, ...]]:
    """Run a query, turning DuckDB errors into :class:`InvalidInputError`."""
    try:
        return con.execute(sql).fetchall()
    except duckdb.Error as exc:
        raise sql_error(where, exc) from None


def check_columns(where: str, types: Mapping[str, str], columns: Any, kind: str = "") -> None:
    """Raise unless every column exists (and, with ``kind``, is numeric/string)."""
    for c in columns:
        if c not in types:
            raise InvalidInputError(f"{where}: unknown column {c!r} (columns: {', '.join(types)})")
        if kind and kind_of(types[c]) != kind:
            raise InvalidInputError(f"{where}: column {c!r} is {types[c]}, not {kind}")


def _nfkc(values: pa.Array) -> pa.Array:
    return pc.utf8_normalize(values, "NFKC")


def _json_value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    return value if isinstance(value, bool | int | float | str) or value is None else str(value)


@dataclass
class _Run:
    """The pipeline while it compiles: SQL of the rows so far and their columns."""

    con: duckdb.DuckDBPyConnection
    sql: str
    types: dict[str, str]
    rn: bool
    reordered: bool = False
    #: The SQL so far holds a step too costly to run again for each statistics pass.
    costly: bool = False
    stages: int = 0
    rejected: list[QuarantineItem] = field(default_factory=list)
    udfs: set[str] = field(default_factory=set)
    #: Arrow tables registered on the connection (kept referenced until the query runs).
    tables: list[Any] = field(default_factory=list)

    def udf(self, name: str) -> None:
        """Register a Python function used by a step, once."""
        if name in self.udfs:
            return
        if name == CARD_UDF:
            register_functions(self.con)
        else:
            self.con.create_function(
                name, _nfkc, ["VARCHAR"], "VARCHAR", type=PythonUDFType.ARROW, side_effects=False
            )
        self.udfs.add(name)

    def settle(self, where: str) -> None:
        """Before a pass over the rows so far: materialize them if recomputing them is costly."""
        if not self.costly:
            return
        table = f"__aifab_stage_{self.stages}"
        fetch(self.con, f"CREATE TEMP TABLE {table} AS {self.sql}", where)
        self.sql, self.costly, self.stages = f"SELECT * FROM {table}", False, self.stages + 1


def _drop_duplicates(r: _Run, s: cs.DropDuplicates, where: str) -> dict[str, Any]:
    subset = s.subset or list(r.types)
    check_columns(where, r.types, subset)
    r.sql = cs.drop_duplicates_sql(r.sql, subset)
    r.reordered = r.costly = True
    return {"subset": subset}


def _drop_near_duplicates(r: _Run, s: cs.DropNearDuplicates, where: str) -> dict[str, Any]:
    import numpy as np

    from aifab.data.dedup import NearDuplicateFinder

    check_columns(where, r.types, [s.column], "string")
    finder = NearDuplicateFinder(
        s.threshold, unit=s.shingle, size=s.size, num_perm=s.num_perm, seed=s.seed
    )
    r.settle(where)
    order = f" ORDER BY {sql_ident(cs.RN)}" if r.reordered else ""
    query = f"SELECT {sql_ident(cs.RN)}, {sql_ident(s.column)} FROM ({r.sql}) AS t{order}"
    dropped = []
    try:
        for batch in r.con.sql(query).to_arrow_reader(_STREAM_BATCH):
            rns = batch.column(0).to_numpy()
            dropped.append(rns[finder.duplicates(batch.column(1).to_pylist())])
    except duckdb.Error as exc:
        raise sql_error(where, exc) from None
    rows = np.concatenate(dropped) if dropped else np.zeros(0, dtype=np.int64)
    table = f"__aifab_near_dups_{len(r.tables)}"
    r.tables.append(pa.table({"rn": rows}))
    r.con.register(table, r.tables[-1])
    r.sql = f"SELECT * FROM ({r.sql}) AS t WHERE {sql_ident(cs.RN)} NOT IN (SELECT rn FROM {table})"
    r.reordered = r.costly = True
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
        cast = fetch(r.con, f"SELECT TRY_CAST({cs.sql_literal(v)} AS {r.types[c]})", where)
        if cast[0][0] is None:
            raise InvalidInputError(f"{where}: {v!r} is not a valid {r.types[c]} for {c!r}")
    fills: dict[str, Any] = dict(s.values)
    if s.strategy:
        r.settle(where)
        aggs = ", ".join(f"{how}({sql_ident(c)})" for c, how in s.strategy.items())
        stats = fetch(r.con, f"SELECT {aggs} FROM ({r.sql}) AS t", where)[0]
        fills.update(zip(s.strategy, stats, strict=True))
    exprs = {c: cs.fill_expr(c, r.types[c], v) for c, v in fills.items() if v is not None}
    r.sql = cs.replace_columns(r.sql, list(r.types), exprs, r.rn)
    return {"filled_with": {c: _json_value(v) for c, v in fills.items()}}


def _cast(r: _Run, s: cs.Cast, where: str) -> dict[str, Any]:
    import json

    check_columns(where, r.types, s.columns)
    for c, t in s.columns.items():
        try:
            r.con.execute(f"DESCRIBE SELECT CAST(NULL AS {t})").fetchall()
        except duckdb.Error:
            raise InvalidInputError(f"{where}: unknown type {t!r} for column {c!r}") from None
    r.settle(where)
    fails = [cs.cast_failure_sql(c, t) for c, t in s.columns.items()]
    record = "{" + ", ".join(f"{sql_string(c)}: {sql_ident(c)}" for c in r.types) + "}"
    query = (
        f"SELECT {sql_ident(cs.RN)}, to_json({record}), {', '.join(fails)} "
        f"FROM ({r.sql}) AS t WHERE {' OR '.join(fails)} ORDER BY 1"
    )
    rejected = 0
    for rn, rec, *flags in fetch(r.con, query, where):
        row = json.loads(rec)
        rejected += 1
        for (c, t), failed in zip(s.columns.items(), flags, strict=True):
            if failed:
                r.rejected.append(
                    QuarantineItem(
                        f"cast:{c}", f"{c}={row[c]!r} cannot be cast to {t}", row, int(rn)
                    )
                )
    if rejected:
        r.sql = f"SELECT * FROM ({r.sql}) AS t WHERE NOT ({' OR '.join(fails)})"
    exprs = {c: f"TRY_CAST({sql_ident(c)} AS {t})" for c, t in s.columns.items()}
    r.sql = cs.replace_columns(r.sql, list(r.types), exprs, r.rn)
    return {"quarantined": rejected}


def _rename(r: _Run, s: cs.Rename, where: str) -> dict[str, Any]:
    check_columns(where, r.types, s.columns)
    names = [s.columns.get(c, c) for c in r.types]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise InvalidInputError(f"{where}: renaming gives two columns named {clash[0]!r}")
    r.sql = cs.project(r.sql, [(sql_ident(c), s.columns.get(c, c)) for c in r.types], r.rn)
    return {}


def _filter(r: _Run, s: cs.Filter, where: str) -> dict[str, Any]:
    r.sql = cs.where_sql(r.sql, check_expression(s.where, where))
    return {}


def _clip(r: _Run, s: cs.Clip, where: str) -> dict[str, Any]:
    check_columns(where, r.types, s.columns, "numeric")
    bounds = {c: (s.lower, s.upper) for c in s.columns}
    qs = [q for q in (s.lower_quantile, s.upper_quantile) if q is not None]
    if qs:
        r.settle(where)
        aggs = ", ".join(f"quantile_cont({sql_ident(c)}, {qs})" for c in s.columns)
        values = fetch(r.con, f"SELECT {aggs} FROM ({r.sql}) AS t", where)[0]
        for c, v in zip(s.columns, values, strict=True):
            v = v or [None, None]
            lo = v[0] if s.lower_quantile is not None else None
            hi = v[-1] if s.upper_quantile is not None else None
            bounds[c] = (lo, hi)
    exprs = {
        c: cs.clip_expr(c, r.types[c], lo, hi)
        for c, (lo, hi) in bounds.items()
        if lo is not None or hi is not None
    }
    r.sql = cs.replace_columns(r.sql, list(r.types), exprs, r.rn)
    return {"bounds": {c: [_json_value(lo), _json_value(hi)] for c, (lo, hi) in bounds.items()}}


def _regex_replace(r: _Run, s: cs.RegexReplace, where: str) -> dict[str, Any]:
    check_columns(where, r.types, [s.column], "string")
    fetch(r.con, f"SELECT regexp_matches('', {sql_string(s.pattern)})", f"{where}: pattern")
    r.sql = cs.replace_columns(r.sql, list(r.types), {s.column: cs.regex_replace_expr(s)}, r.rn)
    return {}


def _normalize_text(r: _Run, s: cs.NormalizeText, where: str) -> dict[str, Any]:
    check_columns(where, r.types, s.columns, "string")
    if s.unicode == "nfkc":
        r.udf(_NFKC_UDF)
        r.costly = True
    exprs = {c: cs.normalize_expr(c, s, _NFKC_UDF) for c in s.columns}
    r.sql = cs.replace_columns(r.sql, list(r.types), exprs, r.rn)
    return {}


def _redact_pii(r: _Run, s: cs.RedactPii, where: str) -> dict[str, Any]:
    check_columns(where, r.types, s.columns, "string")
    if s.luhn and "card" in s.kinds:
        r.udf(CARD_UDF)
    r.costly = True
    exprs = {c: cs.redact_expr(c, s) for c in s.columns}
    r.sql = cs.replace_columns(r.sql, list(r.types), exprs, r.rn)
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


def compile_steps(
    con: duckdb.DuckDBPyConnection, source: VersionInfo, spec: CleanSpec
) -> tuple[str, list[dict[str, Any]], list[QuarantineItem]]:
    """Compile the steps over ``source`` into one SELECT (running the passes steps need).

    Returns the query, per-step info for the lineage record, and the rows to quarantine.
    """
    rn = any(isinstance(s, _NEEDS_RN) for s in spec.steps)
    scan = source.scan_sql()
    sql = (
        f"SELECT *, row_number() OVER () AS {sql_ident(cs.RN)} FROM {scan}"
        if rn
        else (f"SELECT * FROM {scan}")
    )
    run = _Run(con, sql, describe(con, sql, source.ref), rn)
    infos = []
    for i, step in enumerate(spec.steps, start=1):
        where = f"step {i} ({step.op})"
        info = {"step": i, "op": step.op, **_HANDLERS[type(step)](run, step, where)}
        run.types = describe(con, run.sql, where)
        if spec.stats:
            info["rows"] = fetch(con, f"SELECT count(*) FROM ({run.sql}) AS t", where)[0][0]
        infos.append(info)
    columns = ", ".join(sql_ident(c) for c in run.types)
    order = f" ORDER BY {sql_ident(cs.RN)}" if run.reordered else ""
    return f"SELECT {columns} FROM ({run.sql}) AS t{order}", infos, run.rejected


def clean(
    ref: str, spec: CleanSpec | Path | str | Mapping[str, Any], *, output: str | None = None
) -> CommitResult:
    """Apply a cleaning spec to a dataset version and commit the result as a new version.

    Args:
        ref: the input, ``NAME`` or ``NAME@VERSION``.
        spec: a :class:`CleanSpec`, a path to its YAML, or a mapping.
        output: dataset to write to (default: a new version of the input dataset).

    Returns:
        The committed version (``created`` is False when identical content already existed).
        Its lineage parent is the input; its transform holds the spec and per-step details.
        Rows whose values failed a ``cast`` are quarantined (stage ``clean``, rule
        ``cast:<column>``) under the input dataset.
    """
    spec = as_config(CleanSpec, spec, source="clean spec")
    source = resolve(ref)
    if spec.engine == "ray":
        from aifab.data.engines.ray_clean import clean_on_ray

        result, rejected = clean_on_ray(source, spec, output or source.dataset)
        if result.created and rejected:
            quarantine(source.dataset, "clean", rejected, version_id=source.id)
        return result
    con = lake.connect(sandboxed=True)
    try:
        query, infos, rejected = compile_steps(con, source, spec)
        transform = {"kind": "clean", "spec": spec.to_yaml_dict(), "steps": infos}
        try:
            result = commit_query(
                output or source.dataset,
                query,
                source=f"clean({source.ref})",
                transform=transform,
                parents=[source],
                con=con,
            )
        except duckdb.Error as exc:
            raise sql_error(f"clean {source.ref}: running the steps", exc) from None
    finally:
        con.close()
    if result.created and rejected:
        quarantine(source.dataset, "clean", rejected, version_id=source.id)
    return result
