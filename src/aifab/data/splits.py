"""Train/valid/test splits: a seeded ``split`` column added by one DuckDB query.

Every method ranks rows and cuts the ranking at the cumulative fractions, so split sizes are
exact (within rounding) rather than approximately right: ``random`` ranks by a hash of (row
number, seed), ``stratified`` does the same within each class of ``by``, and ``time`` ranks by
``by`` (oldest first, so the newest rows land in test). Rows with the same time share their
rank (``rank()``, not ``row_number()``), so a tie is never split: the cut moves to the end of
the tie and sizes follow it. The original row order is kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import duckdb
from pydantic import Field, model_validator

from aifab.core.config import StrictConfig, as_config
from aifab.core.errors import InvalidInputError
from aifab.data import lake
from aifab.data.catalog import CommitResult, VersionInfo, commit_query, resolve
from aifab.data.engines import Engine

SPLIT_COLUMN = "split"
_NAMES = ("train", "valid", "test")
_ROW = "__aifab_row"


class SplitFractions(StrictConfig):
    """The share of rows in each split; they must sum to 1."""

    train: float = Field(0.8, ge=0.0, le=1.0, description="Share of rows for training.")
    valid: float = Field(0.1, ge=0.0, le=1.0, description="Share of rows for validation.")
    test: float = Field(0.1, ge=0.0, le=1.0, description="Share of rows for the final test.")

    @model_validator(mode="after")
    def _sums_to_one(self) -> SplitFractions:
        total = self.train + self.valid + self.test
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"fractions must sum to 1 (train+valid+test = {total:g})")
        return self


class SplitSpec(StrictConfig):
    """How to split a dataset into train/valid/test."""

    method: Literal["random", "stratified", "time"] = Field(
        "random", description="random (seeded), stratified (by a label column) or time."
    )
    by: str | None = Field(
        None, description="Class column (stratified) or time column (time); unused by random."
    )
    seed: int = Field(0, description="Seed of the random order (random and stratified).")
    fractions: SplitFractions = Field(default_factory=SplitFractions)
    # Left out of dumps: both engines give the same rows and the same lineage record.
    engine: Engine = Field(
        "duckdb",
        exclude=True,
        description="duckdb (in-process) or ray (Ray Data, for tables beyond one node; "
        "random and stratified splits).",
    )

    @model_validator(mode="after")
    def _by_matches_method(self) -> SplitSpec:
        if self.method == "random" and self.by is not None:
            raise ValueError("'by' is only used by the stratified and time methods")
        if self.method != "random" and not self.by:
            raise ValueError(f"method {self.method!r} needs 'by' (the column to split by)")
        return self


def _cuts(spec: SplitSpec) -> tuple[float, float]:
    """Cumulative fraction boundaries of train and train+valid."""
    f = spec.fractions
    return f.train, f.train + f.valid


def _counts(n: int, spec: SplitSpec) -> dict[str, int]:
    """Rows per split for a group of ``n`` rows (the same rounding the SQL uses)."""
    c1, c2 = _cuts(spec)
    # floor(x + 0.5), not round(): Python rounds half to even, DuckDB half away from zero.
    a, b = math.floor(n * c1 + 0.5), math.floor(n * c2 + 0.5)
    return {"train": a, "valid": b - a, "test": n - b}


def _split_sql(v: VersionInfo, spec: SplitSpec) -> str:
    """The SELECT adding the ``split`` column to ``v``, rows in their original order."""
    c1, c2 = _cuts(spec)
    by = lake.sql_ident(spec.by) if spec.by else ""
    seed = int(spec.seed)
    ranking = "row_number()"
    if spec.method == "time":
        order, part, ranking = f"{by} ASC NULLS FIRST", "", "rank()"
    else:
        order = f"hash({_ROW}, {seed}::BIGINT), {_ROW}"
        part = f"PARTITION BY {by}" if spec.method == "stratified" else ""
    keep = f"* EXCLUDE ({lake.sql_ident(SPLIT_COLUMN)})" if SPLIT_COLUMN in v.columns else "*"
    return (
        f"SELECT * EXCLUDE ({_ROW}, __rank, __n), CASE "
        f"WHEN __rank < floor(__n * '{c1!r}'::DOUBLE + 0.5) THEN 'train' "
        f"WHEN __rank < floor(__n * '{c2!r}'::DOUBLE + 0.5) THEN 'valid' "
        f"ELSE 'test' END AS {lake.sql_ident(SPLIT_COLUMN)} FROM ("
        f"SELECT *, {ranking} OVER ({part} ORDER BY {order}) - 1 AS __rank, "
        f"count(*) OVER ({part}) AS __n FROM ("
        f"SELECT {keep}, row_number() OVER () AS {_ROW} FROM {v.scan_sql()})) "
        f"ORDER BY {_ROW}"
    )


def _expected_counts(con: duckdb.DuckDBPyConnection, v: VersionInfo, spec: SplitSpec) -> Any:
    """Per-split row counts (and per class for stratified), recorded with the version.

    Time splits count the result (ties move the cuts); the others know their sizes up front.
    """
    if spec.method == "time":
        got = dict(
            con.execute(
                f"SELECT {lake.sql_ident(SPLIT_COLUMN)}, count(*) FROM ({_split_sql(v, spec)}) "
                "GROUP BY ALL"
            ).fetchall()
        )
        return {s: int(got.get(s, 0)) for s in _NAMES}
    if spec.method != "stratified":
        return _counts(v.num_rows, spec)
    assert spec.by is not None
    rows = con.execute(
        f"SELECT CAST({lake.sql_ident(spec.by)} AS VARCHAR), count(*) FROM {v.scan_sql()} "
        "GROUP BY ALL ORDER BY 1 NULLS FIRST"
    ).fetchall()
    return class_counts(rows, spec)


def class_counts(rows: list[tuple[Any, int]], spec: SplitSpec) -> dict[str, Any]:
    """Per-split totals and rows per split of each class, from ``(class, rows)`` pairs.

    Raises:
        InvalidInputError: a class has one row (it cannot be shared between the splits).
    """
    assert spec.by is not None
    single = [str(k) for k, n in rows if n == 1]
    if single:
        shown = ", ".join(repr(k) for k in single[:20]) + (" ..." if len(single) > 20 else "")
        raise InvalidInputError(
            f"split spec: stratified by {spec.by!r}: {len(single)} class(es) have only one row, "
            f"which cannot be shared between train, valid and test: {shown} "
            "(merge or drop them, or use method: random)"
        )
    per_class = {str(k): _counts(int(n), spec) for k, n in rows}
    totals = {s: sum(c[s] for c in per_class.values()) for s in _NAMES}
    return {**totals, "by_class": per_class}


def split(
    ref: str,
    spec: SplitSpec | Path | str | Mapping[str, Any] | None = None,
    *,
    output: str | None = None,
) -> CommitResult:
    """Add a ``split`` column (train/valid/test) and commit the result as a new version.

    Args:
        ref: the dataset to split (``NAME`` or ``NAME@VERSION``).
        spec: a :class:`SplitSpec`, a YAML path or a mapping (default: random 80/10/10, seed 0).
        output: dataset name for the result (default: a new version of the input dataset).

    Returns:
        The committed version; its transform records the spec and the rows per split.

    Raises:
        InvalidInputError: bad spec (fractions not summing to 1, unknown keys) or ``by`` is
            not a column of the dataset.
    """
    cfg = as_config(SplitSpec, spec, source="split spec")
    v = resolve(ref)
    if v.num_rows == 0:
        raise InvalidInputError(f"cannot split {v.ref}: {v.ref} has no rows")
    if cfg.by is not None and cfg.by not in v.columns:
        raise InvalidInputError(
            f"split spec: by: column {cfg.by!r} not found in {v.ref} "
            f"(columns: {', '.join(v.columns)})"
        )
    if cfg.engine == "ray":
        from aifab.data.engines.ray_split import split_on_ray

        return split_on_ray(v, cfg, output or v.dataset)
    con = lake.connect()
    try:
        counts = _expected_counts(con, v, cfg)
        transform = {"kind": "split", "spec": cfg.model_dump(mode="json"), "counts": counts}
        return commit_query(
            output or v.dataset,
            _split_sql(v, cfg),
            source=f"split({v.ref})",
            transform=transform,
            parents=[v],
            con=con,
        )
    except duckdb.Error as exc:
        raise lake.sql_error("split spec", exc) from None
