"""Reading the lake: head, SQL queries over datasets, version diffs, exports and lineage graphs."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from sqlalchemy import select

from aifab.core import workers
from aifab.core.db import session_scope
from aifab.core.errors import InvalidInputError, NotFoundError, first_line
from aifab.data import lake
from aifab.data.catalog import VersionInfo, ensure_profile, resolve, resolve_in
from aifab.data.refs import parse_ref
from aifab.data.sandbox import check_select
from aifab.data.tables import DatasetRow, LineageEdge, VersionRow

EXPORT_FORMATS = ("parquet", "csv", "tsv", "json", "jsonl", "arrow", "feather")
_QUOTED = re.compile(r'"([^"]+)"')


def head(ref: str | VersionInfo, n: int = 10, columns: Sequence[str] | None = None) -> pa.Table:
    """The first ``n`` rows of a version (only ``columns``, in that order, when given).

    Args:
        ref: ``NAME`` or ``NAME@VERSION``, or a version already resolved.
        n: how many rows.
        columns: the columns to read (None: all of them).

    Raises:
        InvalidInputError: a negative ``n``, or a column the version does not have.
    """
    if n < 0:
        raise InvalidInputError(f"n must be >= 0, got {n}")
    v = ref if isinstance(ref, VersionInfo) else resolve(ref)
    picked = "*"
    if columns is not None:
        missing = [c for c in columns if c not in set(v.columns)]
        if missing:
            raise InvalidInputError(f"{v.ref} has no column {missing[0]!r}")
        if not columns:
            raise InvalidInputError("columns: give at least one column (or None for all)")
        picked = ", ".join(lake.sql_ident(c) for c in columns)
    sql = f"SELECT {picked} FROM {v.scan_sql()} LIMIT {int(n)}"
    return lake.connect().sql(sql).to_arrow_table()


def _bind_datasets(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Create a view per dataset named in ``sql``: ``name`` (latest) or ``"name@3"``."""
    from aifab.data.catalog import list_datasets

    names = {d["name"] for d in list_datasets()}
    wanted = {m for m in _QUOTED.findall(sql) if "@" in m}
    words = set(re.findall(r"[A-Za-z0-9_.\-]+", sql))
    for name in names:
        if name in words or f'"{name}"' in sql:
            con.execute(
                f"CREATE VIEW {lake.sql_ident(name)} AS SELECT * FROM {resolve(name).scan_sql()}"
            )
    for ref in wanted:
        con.execute(f"CREATE VIEW {lake.sql_ident(ref)} AS SELECT * FROM {resolve(ref).scan_sql()}")


#: DuckDB's memory cap and threads for a query in a worker of the pool: a caller's SQL gets a
#: share of the machine, not all of it (the worker's address-space limit is the hard cap).
WORKER_QUERY_MEMORY = "512MB"
WORKER_QUERY_THREADS = 1
#: A query without its own time limit is killed after this long in the pool.
WORKER_QUERY_TIMEOUT_S = 300.0
#: The pool kills a query's worker this long after DuckDB's own interrupt was due.
_KILL_GRACE_S = 1.0


def query(sql: str, limit: int | None = None, *, timeout_s: float | None = None) -> pa.Table:
    """Run read-only SQL over datasets: ``SELECT * FROM iris`` or ``FROM "iris@2"``.

    Only a single SELECT (or WITH/FROM/VALUES) statement is run, on a sandboxed connection: no
    COPY, EXPORT, ATTACH, SET or second statement, and no files outside the lake. Where the
    process runs a worker pool (the server, ``aifab mcp``), the query runs in a worker with
    DuckDB's ``memory_limit`` and ``threads`` set, and the worker is killed shortly after
    ``timeout_s`` if one call (``repeat``, ``string_agg``...) did not heed the interrupt.

    Args:
        sql: the statement.
        limit: at most this many rows.
        timeout_s: stop the query (DuckDB's interrupt, not abandon it) after this long.

    Raises:
        InvalidInputError: the SQL does not parse or bind, is not one SELECT statement, was
            stopped at ``timeout_s``, or went over the memory limit (the message says why, no
            traceback).
    """
    check_select(sql, "")
    if not workers.is_running():
        return _run_query(sql, limit, timeout_s)
    env = {k: v for k, v in os.environ.items() if k.startswith("AIFAB_")}
    kill_at = (timeout_s or WORKER_QUERY_TIMEOUT_S) + _KILL_GRACE_S
    return workers.run(query_task, env, sql, limit, timeout_s, timeout_s=kill_at, what="query")


def query_task(
    env: dict[str, str], sql: str, limit: int | None, timeout_s: float | None
) -> pa.Table:
    """:func:`query` inside a pool worker: the caller's ``AIFAB_*`` settings, capped DuckDB.

    The worker forked from a server that may have started before the caller's environment
    was set (tests switch workspaces), so the settings travel with the task.
    """
    for key in [k for k in os.environ if k.startswith("AIFAB_") and k not in env]:
        del os.environ[key]
    os.environ.update(env)
    return _run_query(
        sql, limit, timeout_s, memory_limit=WORKER_QUERY_MEMORY, threads=WORKER_QUERY_THREADS
    )


def _run_query(
    sql: str,
    limit: int | None,
    timeout_s: float | None,
    *,
    memory_limit: str | None = None,
    threads: int | None = None,
) -> pa.Table:
    con = lake.connect(sandboxed=True, memory_limit=memory_limit, threads=threads)
    done = threading.Event()
    if timeout_s is not None:
        threading.Thread(
            target=_interrupt_at, args=(con, timeout_s, done), name="aifab-sql-watch", daemon=True
        ).start()
    try:
        _bind_datasets(con, sql)
        rel = con.sql(sql)
        if rel is None:
            raise InvalidInputError("query must be a SELECT that returns rows")
        if limit is not None:
            rel = rel.limit(limit)
        return rel.to_arrow_table()
    except duckdb.InterruptException:
        raise InvalidInputError(f"query stopped at its time limit ({timeout_s:g} s)") from None
    except duckdb.OutOfMemoryException as exc:
        raise InvalidInputError(f"query went over its memory limit: {first_line(exc)}") from None
    except duckdb.Error as exc:
        raise InvalidInputError(f"SQL error: {first_line(exc)}") from None
    finally:
        done.set()
        con.close()


def _interrupt_at(con: duckdb.DuckDBPyConnection, timeout_s: float, done: threading.Event) -> None:
    """Interrupt ``con`` at ``timeout_s``, and again until the query has ended.

    Repeated because an interrupt that lands between two statements (binding the datasets,
    then the query) is lost.
    """
    if done.wait(timeout_s):
        return
    while not done.is_set():
        con.interrupt()
        done.wait(0.05)


def diff(a: str, b: str) -> dict[str, Any]:
    """Compare two versions: schema changes, row counts, rows only in one side, profile shifts."""
    va, vb = resolve(a), resolve(b)
    ta = {c["name"]: c["type"] for c in va.schema}
    tb = {c["name"]: c["type"] for c in vb.schema}
    result: dict[str, Any] = {
        "a": va.ref,
        "b": vb.ref,
        "same_content": va.content_hash == vb.content_hash,
        "rows": {"a": va.num_rows, "b": vb.num_rows, "delta": vb.num_rows - va.num_rows},
        "columns_added": sorted(set(tb) - set(ta)),
        "columns_removed": sorted(set(ta) - set(tb)),
        "columns_retyped": {c: [ta[c], tb[c]] for c in sorted(set(ta) & set(tb)) if ta[c] != tb[c]},
    }
    shared = [c for c in ta if c in tb and ta[c] == tb[c]]
    if shared:
        cols = ", ".join(lake.sql_ident(c) for c in shared)
        con = lake.connect()
        sa, sb = va.scan_sql(), vb.scan_sql()
        only_a = f"SELECT {cols} FROM {sa} EXCEPT ALL SELECT {cols} FROM {sb}"
        only_b = f"SELECT {cols} FROM {sb} EXCEPT ALL SELECT {cols} FROM {sa}"
        row = con.execute(
            f"SELECT (SELECT count(*) FROM ({only_a})), (SELECT count(*) FROM ({only_b}))"
        ).fetchall()[0]
        result["rows_only_in_a"], result["rows_only_in_b"] = row or (0, 0)
    result["profile_changes"] = _profile_changes(va, vb, shared)
    return result


def _profile_changes(va: VersionInfo, vb: VersionInfo, cols: list[str]) -> dict[str, Any]:
    pa_ = ensure_profile(va).get("columns", {})
    pb = ensure_profile(vb).get("columns", {})
    changes: dict[str, Any] = {}
    for c in cols:
        a, b = pa_.get(c, {}), pb.get(c, {})
        delta = {
            k: [a.get(k), b.get(k)]
            for k in ("null_share", "distinct", "mean", "std", "min", "max")
            if a.get(k) != b.get(k)
        }
        if delta:
            changes[c] = delta
    return changes


def export(ref: str, path: Path, fmt: str | None = None) -> Path:
    """Write a version to ``path`` (format from the suffix by default).

    ``json`` is one JSON array, ``jsonl`` one object per line, ``csv``/``tsv`` have a header,
    ``arrow``/``feather`` are an Arrow IPC file (Feather v2), ``parquet`` as in the lake.
    """
    v = resolve(ref)
    fmt = (fmt or path.suffix.lstrip(".")).lower()
    if fmt not in EXPORT_FORMATS:
        raise InvalidInputError(
            f"cannot export to {fmt or 'a file without suffix'!r}: use one of {EXPORT_FORMATS}"
        )
    from aifab.core.atomic import atomic_path

    select = f"SELECT * FROM {v.scan_sql()}"
    with atomic_path(path) as tmp:
        if fmt in ("arrow", "feather"):
            _write_arrow(select, tmp)
        else:
            options = _COPY_OPTIONS[fmt]
            lake.connect().execute(f"COPY ({select}) TO {lake.sql_string(str(tmp))} ({options})")
    return path


_COPY_OPTIONS = {
    "parquet": "FORMAT parquet",
    "csv": "FORMAT csv, HEADER true",
    "tsv": "FORMAT csv, HEADER true, DELIMITER '\t'",
    "json": "FORMAT json, ARRAY true",
    "jsonl": "FORMAT json",
}


def _write_arrow(select: str, tmp: Path) -> None:
    """Stream the rows into an Arrow IPC file, batch by batch (never all rows in memory)."""
    import pyarrow as pa

    reader = lake.connect().sql(select).to_arrow_reader()
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, reader.schema) as writer:
        for batch in reader:
            writer.write_batch(batch)


def lineage(ref: str, depth: int = 50) -> dict[str, Any]:
    """The ancestry and descendants of a version: nodes (versions) and edges (parent -> child)."""
    with session_scope(readonly=True) as s:
        root = resolve_in(s, parse_ref(ref))
        nodes: dict[int, dict[str, Any]] = {}
        edges: set[tuple[int, int]] = set()

        def node(vid: int) -> None:
            if vid in nodes:
                return
            row = s.get(VersionRow, vid)
            if row is None:
                raise NotFoundError(f"version id {vid} missing from the catalog")
            ds = s.get(DatasetRow, row.dataset_id)
            assert ds is not None
            nodes[vid] = {
                "ref": f"{ds.name}@{row.version}",
                "content_hash": row.content_hash,
                "rows": row.num_rows,
                "source": row.source,
                "transform": row.transform.get("kind"),
                "created_at": row.created_at,
            }

        def walk(start: int, up: bool) -> None:
            frontier, seen = [start], {start}
            for _ in range(depth):
                col_from, col_to = (
                    (LineageEdge.child_id, LineageEdge.parent_id)
                    if up
                    else (LineageEdge.parent_id, LineageEdge.child_id)
                )
                pairs = s.execute(select(col_from, col_to).where(col_from.in_(frontier))).all()
                frontier = []
                for a_, b_ in pairs:
                    edges.add((b_, a_) if up else (a_, b_))
                    node(b_)
                    if b_ not in seen:
                        seen.add(b_)
                        frontier.append(b_)
                if not frontier:
                    break

        node(root.id)
        walk(root.id, up=True)
        walk(root.id, up=False)
        return {
            "root": root.ref,
            "nodes": [nodes[k] for k in sorted(nodes)],
            "edges": [
                {"parent": nodes[p]["ref"], "child": nodes[c]["ref"]} for p, c in sorted(edges)
            ],
        }
