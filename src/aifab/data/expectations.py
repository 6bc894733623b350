"""Expectations: their typed options (one YAML key each) and the SQL of their row rules.

Each row-level expectation compiles to :class:`RowRule` s whose ``fails`` predicate is true for
the rows breaking it; ``row_count`` and ``sql: {assert: ...}`` are checked on the whole dataset.
Every expectation has a ``level``: ``error`` (default) failures count against the run,
``warn`` failures are only reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ConfigDict, Field, model_validator

from aifab.core.config import StrictConfig
from aifab.data.clean_steps import RN, Scalar, one_key_form, sql_literal
from aifab.data.engines import Engine
from aifab.data.lake import sql_ident, sql_string
from aifab.data.sandbox import check_expression

Level = Literal["error", "warn"]


def _level() -> Any:
    return Field("error", description="error: failures count against the run; warn: only reported.")


@dataclass(frozen=True)
class RowRule:
    """A row rule compiled to SQL: ``fails`` is true for the rows that break it."""

    name: str
    kind: str
    fails: str
    reason: str
    column: str | None = None
    level: Level = "error"


class NotNull(StrictConfig):
    """Each listed column has no nulls (one rule per column)."""

    op: Literal["not_null"] = "not_null"
    columns: list[str] = Field(min_length=1)
    name: str | None = None
    level: Level = _level()

    def row_rules(self, index: int) -> list[RowRule]:
        """One ``not_null:<column>`` rule per column (``<name>:<column>`` when named)."""
        many = len(self.columns) > 1
        return [
            RowRule(
                (f"{self.name}:{c}" if many else self.name) if self.name else f"not_null:{c}",
                "not_null",
                f"{sql_ident(c)} IS NULL",
                "is null",
                c,
            )
            for c in self.columns
        ]


class Unique(StrictConfig):
    """The combination of ``columns`` is unique; every repeat after the first fails.

    Rows with a null in any of the columns are not checked (as SQL ``UNIQUE``).
    """

    op: Literal["unique"] = "unique"
    columns: list[str] = Field(min_length=1)
    name: str | None = None
    level: Level = _level()

    def row_rules(self, index: int) -> list[RowRule]:
        """The rule flagging repeats, in row order."""
        keys = ", ".join(sql_ident(c) for c in self.columns)
        nulls = " OR ".join(f"{sql_ident(c)} IS NULL" for c in self.columns)
        fails = (
            f"CASE WHEN {nulls} THEN FALSE ELSE row_number() OVER "
            f"(PARTITION BY {keys} ORDER BY {sql_ident(RN)}) > 1 END"
        )
        cols = ",".join(self.columns)
        reason = f"repeats an earlier row's ({cols})"
        return [RowRule(self.name or f"unique:{cols}", "unique", fails, reason)]


class Between(StrictConfig):
    """``min <= column <= max`` (either bound optional); nulls pass."""

    op: Literal["between"] = "between"
    column: str
    min: Scalar | None = None
    max: Scalar | None = None
    name: str | None = None
    level: Level = _level()

    @model_validator(mode="after")
    def _check(self) -> Between:
        if self.min is None and self.max is None:
            raise ValueError("give 'min', 'max' or both")
        return self

    def row_rules(self, index: int) -> list[RowRule]:
        """The rule flagging values out of range."""
        c = sql_ident(self.column)
        tests = [
            f"{c} {op} {sql_literal(v)}"
            for op, v in (("<", self.min), (">", self.max))
            if v is not None
        ]
        fails = f"coalesce({' OR '.join(tests)}, FALSE)"
        reason = f"not between {self.min} and {self.max}"
        return [
            RowRule(self.name or f"between:{self.column}", "between", fails, reason, self.column)
        ]


class InSet(StrictConfig):
    """The column's value is one of ``values``; nulls pass."""

    op: Literal["in_set"] = "in_set"
    column: str
    values: list[Scalar] = Field(min_length=1)
    name: str | None = None
    level: Level = _level()

    def row_rules(self, index: int) -> list[RowRule]:
        """The rule flagging values outside the set."""
        values = ", ".join(sql_literal(v) for v in self.values)
        fails = f"coalesce({sql_ident(self.column)} NOT IN ({values}), FALSE)"
        return [
            RowRule(
                self.name or f"in_set:{self.column}",
                "in_set",
                fails,
                "not in the allowed set",
                self.column,
            )
        ]


class Regex(StrictConfig):
    """The value matches the RE2 ``pattern``; nulls pass.

    ``match: full`` (default) needs the whole value to match (``regexp_full_match``);
    ``match: partial`` needs a match anywhere in it (``regexp_matches``).
    """

    op: Literal["regex"] = "regex"
    column: str
    pattern: str = Field(min_length=1)
    match: Literal["full", "partial"] = Field(
        "full", description="full (default): the whole value matches; partial: any part does."
    )
    name: str | None = None
    level: Level = _level()

    def row_rules(self, index: int) -> list[RowRule]:
        """The rule flagging values that do not match."""
        value = f"CAST({sql_ident(self.column)} AS VARCHAR)"
        fn = "regexp_full_match" if self.match == "full" else "regexp_matches"
        fails = f"coalesce(NOT {fn}({value}, {sql_string(self.pattern)}), FALSE)"
        how = (
            "full match; set match: partial to search within values"
            if self.match == "full"
            else "partial match anywhere in the value"
        )
        return [
            RowRule(
                self.name or f"regex:{self.column}",
                "regex",
                fails,
                f"does not match {self.pattern} ({how})",
                self.column,
            )
        ]


class RowCount(StrictConfig):
    """Dataset level: the number of rows is within ``[min, max]``."""

    op: Literal["row_count"] = "row_count"
    min: int | None = Field(None, ge=0)
    max: int | None = Field(None, ge=0)
    name: str | None = None
    level: Level = _level()

    def row_rules(self, index: int) -> list[RowRule]:
        """None: this is a dataset-level rule."""
        return []

    def holds(self, rows: int) -> bool:
        """Whether ``rows`` is within the bounds."""
        return (self.min is None or rows >= self.min) and (self.max is None or rows <= self.max)


class Sql(StrictConfig):
    """Custom SQL: a row predicate or a dataset-level query.

    ``where`` is a predicate every row must satisfy (null counts as failing); ``assert`` is a
    query over the table ``data`` that must return one true value.
    """

    model_config = ConfigDict(populate_by_name=True)

    op: Literal["sql"] = "sql"
    where: str | None = Field(None, min_length=1)
    assert_: str | None = Field(None, alias="assert", min_length=1)
    name: str | None = None
    level: Level = _level()

    @model_validator(mode="after")
    def _check(self) -> Sql:
        if (self.where is None) == (self.assert_ is None):
            raise ValueError("give exactly one of 'where' (row level) or 'assert' (dataset level)")
        return self

    def row_rules(self, index: int) -> list[RowRule]:
        """The predicate's rule (none for ``assert``), parsed as exactly one SQL expression."""
        if self.where is None:
            return []
        predicate = check_expression(self.where, f"expectation {index} (sql)")
        fails = f"NOT coalesce({predicate}, FALSE)"
        return [
            RowRule(self.name or f"sql:{index}", "sql", fails, f"does not satisfy {self.where}")
        ]


_TYPES = (NotNull, Unique, Between, InSet, Regex, RowCount, Sql)

Expectation = Annotated[
    Annotated[
        NotNull | Unique | Between | InSet | Regex | RowCount | Sql, Field(discriminator="op")
    ],
    BeforeValidator(one_key_form([t.model_fields["op"].default for t in _TYPES], "expectation")),
]


class ExpectationSuite(StrictConfig):
    """Expectations checked against one dataset version.

    A run *fails* (``passed`` is False) when an ``error``-level dataset rule fails, or when the
    share of rows failing an ``error``-level row rule exceeds ``max_failure_share`` (default
    0.0: any such row fails the run). A failed run commits and quarantines nothing.
    ``warn``-level failures never fail the run; their rows are reported and kept.

    When the run passes, ``on_failure: quarantine`` (default) stores each row that broke an
    ``error``-level rule in the quarantine (stage ``validate``, once per rule it broke) and
    commits the other rows as a new version; when none broke one no version is made.
    ``report`` only reports.
    """

    expectations: list[Expectation] = Field(min_length=1)
    on_failure: Literal["quarantine", "report"] = "quarantine"
    max_failure_share: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Largest share of rows that may fail error-level rules (default 0).",
    )
    examples: int = Field(5, ge=0, le=100, description="Failing rows shown per rule.")
    # Left out of dumps: both engines give the same rows, quarantine and lineage record.
    engine: Engine = Field(
        "duckdb",
        exclude=True,
        description="duckdb (in-process) or ray (Ray Data, for tables beyond one node).",
    )

    def to_yaml_dict(self) -> dict[str, object]:
        """The suite in its YAML shape (one key per expectation), JSON-ready."""
        expectations = [
            {e.op: e.model_dump(mode="json", by_alias=True, exclude={"op"})}
            for e in self.expectations
        ]
        return {
            **self.model_dump(mode="json", exclude={"expectations"}),
            "expectations": expectations,
        }


def columns_of(e: Expectation) -> list[str]:
    """The columns an expectation names (checked against the data before it runs)."""
    if isinstance(e, NotNull | Unique):
        return list(e.columns)
    return [e.column] if isinstance(e, Between | InSet | Regex) else []
