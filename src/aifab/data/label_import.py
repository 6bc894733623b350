"""Importing labels from a CSV or JSONL file: joined onto a dataset by key, as a new version.

Imported labels get confidence 1 and source ``import``; rows the file does not mention keep
the labels they had. File rows whose key is not in the dataset, that carry no label, or that
repeat a key (the last one wins) are quarantined (stage ``label``), never silently dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import duckdb

from aifab.core.errors import InvalidInputError, first_line
from aifab.data import lake
from aifab.data.catalog import CommitResult, VersionInfo, commit_query, resolve
from aifab.data.label_functions import LABEL_COLUMNS
from aifab.data.quarantine import QuarantineItem, quarantine

_CSV = (".csv", ".tsv", ".txt")
_JSONL = (".jsonl", ".ndjson", ".json")
_FILE = "__aifab_label_file"
#: How far :func:`item_columns` walks up the lineage looking for the last label run.
_MAX_LINEAGE_STEPS = 50


@dataclass(frozen=True)
class ImportResult(CommitResult):
    """The committed version plus what happened to the file's rows."""

    imported: int = 0
    quarantined: dict[str, int] | None = None


def keyed_sql(v: VersionInfo, key: str | None) -> str:
    """``v``'s rows with ``__row`` (0-based row number) and ``__key`` (the key as text)."""
    key_expr = lake.sql_ident(key) if key else "__row"
    return (
        f"SELECT *, CAST({key_expr} AS VARCHAR) AS __key FROM "
        f"(SELECT *, row_number() OVER () - 1 AS __row FROM {v.scan_sql()})"
    )


def item_columns(v: VersionInfo) -> tuple[str | None, str | None]:
    """The key and text columns of the newest label run in ``v``'s lineage (None if unset)."""
    cur: VersionInfo | None = v
    for _ in range(_MAX_LINEAGE_STEPS):
        if cur is None:
            break
        if cur.transform.get("kind") == "label":
            key, text = cur.transform.get("key"), cur.transform.get("text_column")
            return (key if key in v.columns else None, text if text in v.columns else None)
        cur = resolve(cur.parents[0]) if cur.parents else None
    return None, None


def _reader(path: Path) -> tuple[str, int]:
    """The DuckDB table function reading ``path`` and the line number of its first row."""
    suffix = path.suffix.lower()
    p = lake.sql_string(str(path))
    if suffix in _CSV:
        return f"read_csv({p}, header = true, all_varchar = true)", 2
    if suffix in _JSONL:
        return f"read_json({p}, format = 'newline_delimited')", 1
    raise InvalidInputError(
        f"{path}: unsupported label file type {suffix!r} (use .csv, .tsv, .jsonl or .ndjson)"
    )


def _load_file(con: duckdb.DuckDBPyConnection, path: Path, key: str, label_column: str) -> None:
    """Materialize the file as ``(line, k, lab, rec)`` after checking its columns."""
    if not path.is_file():
        raise InvalidInputError(f"{path}: file not found")
    reader, first_row_line = _reader(path)
    try:
        cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {reader}").fetchall()]
        for field, col in (("key", key), ("label_column", label_column)):
            if col not in cols:
                raise InvalidInputError(
                    f"{path}: {field}: column {col!r} not found in the file "
                    f"(columns: {', '.join(cols)})"
                )
        con.execute(
            f"CREATE TEMP TABLE {_FILE} AS SELECT "
            f"row_number() OVER () - 1 + {first_row_line} AS line, "
            f"CAST({lake.sql_ident(key)} AS VARCHAR) AS k, "
            f"nullif(trim(CAST({lake.sql_ident(label_column)} AS VARCHAR)), '') AS lab, "
            f"CAST(to_json(t) AS VARCHAR) AS rec FROM {reader} t"
        )
    except duckdb.Error as exc:
        raise InvalidInputError(f"{path}: cannot read: {first_line(exc)}") from None


def _rejects(con: duckdb.DuckDBPyConnection, v: VersionInfo, key: str) -> list[QuarantineItem]:
    """File rows with an unknown key, no label, or a key repeated later in the file."""
    rows = con.execute(
        f"SELECT * FROM (SELECT line, k, lab, rec, CASE "
        f"WHEN k IS NULL OR k NOT IN (SELECT __key FROM ({keyed_sql(v, key)})) "
        f"THEN 'unknown_key' "
        f"WHEN lab IS NULL THEN 'missing_label' "
        f"WHEN line < max(line) OVER (PARTITION BY k) THEN 'duplicate_key' END AS rule "
        f"FROM {_FILE}) WHERE rule IS NOT NULL ORDER BY line"
    ).fetchall()
    reasons = {
        "unknown_key": "key {k!r} is not in " + v.ref,
        "missing_label": "no label for key {k!r}",
        "duplicate_key": "key {k!r} appears again later in the file; the later label is used",
    }
    return [
        QuarantineItem(
            rule=rule, reason=reasons[rule].format(k=k), record=json.loads(rec), line=int(line)
        )
        for line, k, _lab, rec, rule in rows
    ]


def _import_sql(v: VersionInfo, key: str) -> str:
    labeled = set(LABEL_COLUMNS) <= set(v.columns)
    old_label, old_conf, old_src = (
        ("d.label", "d.label_confidence", "d.label_source")
        if labeled
        else ("NULL::VARCHAR", "NULL::DOUBLE", "NULL::VARCHAR")
    )
    drop = ", ".join(["__row", "__key", *(c for c in LABEL_COLUMNS if c in v.columns)])
    good = (
        f"SELECT k, lab FROM {_FILE} WHERE lab IS NOT NULL "
        f"QUALIFY line = max(line) OVER (PARTITION BY k)"
    )
    return (
        f"SELECT d.* EXCLUDE ({drop}), coalesce(i.lab, {old_label}) AS label, "
        f"CASE WHEN i.lab IS NOT NULL THEN 1.0::DOUBLE ELSE {old_conf} END AS label_confidence, "
        f"CASE WHEN i.lab IS NOT NULL THEN 'import' ELSE {old_src} END AS label_source "
        f"FROM ({keyed_sql(v, key)}) d LEFT JOIN ({good}) i ON d.__key = i.k ORDER BY d.__row"
    )


def import_labels(
    ref: str,
    path: Path | str,
    *,
    key: str,
    label_column: str = "label",
    output: str | None = None,
) -> ImportResult:
    """Join labels from a CSV/JSONL file onto a dataset by ``key``; commit a new version.

    Args:
        ref: the dataset to label (``NAME`` or ``NAME@VERSION``).
        path: a ``.csv``/``.tsv`` (with a header) or ``.jsonl``/``.ndjson`` file.
        key: the key column, present in both the dataset and the file.
        label_column: the file's label column.
        output: dataset name for the result (default: a new version of the input dataset).

    Returns:
        The committed version, how many dataset rows got an imported label, and how many
        file rows were quarantined per rule (``unknown_key``, ``missing_label``,
        ``duplicate_key``).

    Raises:
        InvalidInputError: the key is not a dataset column, or the file is unreadable or
            lacks the key or label column.
    """
    v = resolve(ref)
    if key not in v.columns:
        raise InvalidInputError(
            f"key: column {key!r} not found in {v.ref} (columns: {', '.join(v.columns)})"
        )
    path = Path(path)
    con = lake.connect()
    _load_file(con, path, key, label_column)
    rejects = _rejects(con, v, key)
    counts: dict[str, int] = {}
    for item in rejects:
        counts[item.rule] = counts.get(item.rule, 0) + 1
    sql = _import_sql(v, key)
    row = con.execute(f"SELECT count(*) FROM ({sql}) WHERE label_source = 'import'").fetchall()[0]
    imported = int(row[0]) if row else 0
    transform = {
        "kind": "label",
        "method": "import",
        "key": key,
        "text_column": item_columns(v)[1],
        "file": str(path),
        "label_column": label_column,
        "imported": imported,
        "quarantined": counts,
    }
    result = commit_query(
        output or v.dataset,
        sql,
        source=f"import_labels({path.name})",
        transform=transform,
        parents=[v],
        con=con,
    )
    quarantine(v.dataset, "label", rejects, version_id=v.id)
    return ImportResult(result.version, result.created, imported=imported, quarantined=counts)
