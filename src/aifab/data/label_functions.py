"""Labeling functions and their weighted majority vote, compiled to DuckDB SQL.

Each function becomes one boolean expression (keyword, regex or a SQL predicate); the vote adds
the weights of the firing functions per label and picks the heaviest label, so a whole dataset
is labeled by one projection instead of a Python loop over rows.
"""

from __future__ import annotations

from typing import Any

import duckdb
from pydantic import Field, model_validator

from aifab.core.config import StrictConfig
from aifab.core.errors import InvalidInputError, first_line
from aifab.data import lake
from aifab.data.engines import Engine
from aifab.data.sandbox import check_expression

LABEL_COLUMNS = ("label", "label_confidence", "label_source")
#: Characters with a meaning in RE2 patterns, escaped so keywords match literally.
_RE2_SPECIAL = set("\\.^$|?*+()[]{}")


class KeywordRule(StrictConfig):
    """Fires when ``column`` contains any of ``words`` (case-insensitive, whole words)."""

    column: str
    words: list[str] = Field(min_length=1)


class RegexRule(StrictConfig):
    """Fires when ``column`` matches ``pattern`` (RE2 syntax) anywhere."""

    column: str
    pattern: str = Field(min_length=1)
    ignore_case: bool = False


class LabelingFunction(StrictConfig):
    """One vote: when its rule fires the row gets ``label`` with ``weight``; else it abstains."""

    name: str = Field(min_length=1, max_length=100)
    label: str = Field(min_length=1, max_length=200)
    weight: float = Field(1.0, gt=0.0, description="Vote weight (default 1).")
    keyword: KeywordRule | None = None
    regex: RegexRule | None = None
    sql: str | None = Field(None, description="A SQL predicate over the row, e.g. amount > 1000.")

    @model_validator(mode="after")
    def _one_rule(self) -> LabelingFunction:
        given = [k for k in ("keyword", "regex", "sql") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of keyword, regex, sql (got {given or 'none'})")
        return self


class LabelSpec(StrictConfig):
    """Labeling functions and the columns that identify and show an item."""

    key: str | None = Field(None, description="Item key column (default: the row number).")
    text_column: str | None = Field(None, description="Column shown to human labelers.")
    functions: list[LabelingFunction] = Field(min_length=1)
    # Left out of dumps: both engines give the same rows and the same lineage record.
    engine: Engine = Field(
        "duckdb",
        exclude=True,
        description="duckdb (in-process) or ray (Ray Data, for tables beyond one node).",
    )

    @model_validator(mode="after")
    def _unique_names(self) -> LabelSpec:
        names = [f.name for f in self.functions]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"function names must be unique (repeated: {', '.join(dupes)})")
        return self

    @property
    def labels(self) -> list[str]:
        """The distinct labels voted, in the order they first appear (the tie-break order)."""
        return list(dict.fromkeys(f.label for f in self.functions))


def _re2_escape(word: str) -> str:
    return "".join("\\" + ch if ch in _RE2_SPECIAL else ch for ch in word)


def keyword_pattern(words: list[str]) -> str:
    r"""An RE2 pattern matching any word as a whole word, ignoring case (``\b`` on both sides)."""
    return r"(?i)\b(?:" + "|".join(_re2_escape(w) for w in words) + r")\b"


def condition_sql(fn: LabelingFunction) -> str:
    """The boolean SQL expression that is true where ``fn`` fires."""
    if fn.keyword is not None:
        col = f"CAST({lake.sql_ident(fn.keyword.column)} AS VARCHAR)"
        return f"regexp_matches({col}, {lake.sql_string(keyword_pattern(fn.keyword.words))})"
    if fn.regex is not None:
        col = f"CAST({lake.sql_ident(fn.regex.column)} AS VARCHAR)"
        flags = "(?i)" if fn.regex.ignore_case else ""
        return f"regexp_matches({col}, {lake.sql_string(flags + fn.regex.pattern)})"
    assert fn.sql is not None
    # Checked here too, not only in check_functions: no caller can splice in a statement.
    return f"CAST({check_expression(fn.sql, f'label spec: function {fn.name!r}')} AS BOOLEAN)"


def check_functions(
    con: duckdb.DuckDBPyConnection, rel: str, columns: list[str], spec: LabelSpec
) -> None:
    """Fail early, naming the function, on a missing column, a bad regex or bad SQL."""
    for i, fn in enumerate(spec.functions):
        rule = fn.keyword or fn.regex
        where = f"functions.{i} ({fn.name})"
        if rule is not None and rule.column not in columns:
            raise InvalidInputError(
                f"label spec: {where}: column {rule.column!r} not found "
                f"(columns: {', '.join(columns)})"
            )
        if fn.sql is not None:
            check_expression(fn.sql, f"label spec: {where}")
        try:
            con.execute(f"SELECT {condition_sql(fn)} FROM {rel} LIMIT 0").fetchall()
            if fn.regex is not None:  # RE2 compiles constant patterns only when it meets a row
                con.execute("SELECT regexp_matches('', ?)", [fn.regex.pattern]).fetchall()
        except duckdb.Error as exc:
            raise InvalidInputError(f"label spec: {where}: {first_line(exc)}") from None


def fires_sql(spec: LabelSpec) -> list[str]:
    """``__lf<i>`` boolean columns, one per function (NULL counts as not firing)."""
    return [
        f"coalesce({condition_sql(fn)}, false) AS __lf{i}" for i, fn in enumerate(spec.functions)
    ]


def _score(spec: LabelSpec, label: str) -> str:
    terms = [
        f"CASE WHEN __lf{i} THEN '{fn.weight!r}'::DOUBLE ELSE 0.0 END"
        for i, fn in enumerate(spec.functions)
        if fn.label == label
    ]
    return " + ".join(terms)


def vote_sql(spec: LabelSpec, rel: str) -> str:
    """SELECT over ``rel`` (which has the ``__lf<i>`` columns) adding ``__lf_label/__lf_conf``.

    Ties go to the label that appears first in the spec; rows where every function abstains
    get NULL for both.
    """
    labels = spec.labels
    scores = ", ".join(f"{_score(spec, lab)} AS __s{j}" for j, lab in enumerate(labels))
    best = "greatest(" + ", ".join(f"__s{j}" for j in range(len(labels))) + ")"
    total = " + ".join(f"__s{j}" for j in range(len(labels)))
    pick = " ".join(
        f"WHEN __s{j} = __best THEN {lake.sql_string(lab)}" for j, lab in enumerate(labels)
    )
    score_cols = ", ".join(f"__s{j}" for j in range(len(labels)))
    return (
        f"SELECT * EXCLUDE ({score_cols}, __best, __total), "
        f"CASE WHEN __total > 0 THEN CASE {pick} END END AS __lf_label, "
        f"CASE WHEN __total > 0 THEN __best / __total END AS __lf_conf "
        f"FROM (SELECT *, {best} AS __best, {total} AS __total "
        f"FROM (SELECT *, {scores} FROM {rel}))"
    )


def function_stats(con: duckdb.DuckDBPyConnection, rel: str, spec: LabelSpec) -> dict[str, Any]:
    """Per-function coverage and conflicts, plus overall coverage, from one aggregate query.

    Coverage is the share of rows a function fires on; a conflict is a row where it fires
    and another function votes a different label.
    """
    row = con.execute(
        f"SELECT {', '.join(stats_aggregates(spec))} "
        f"FROM (SELECT {', '.join(fires_sql(spec))} FROM {rel})"
    ).fetchall()[0]
    assert row is not None
    return stats_from_counts([int(v or 0) for v in row], spec)


def stats_aggregates(spec: LabelSpec) -> list[str]:
    """The counts behind :func:`function_stats` over rows with the ``__lf<i>`` columns.

    Rows, rows any function fires on, then fires and conflicts of each function (sums of
    them over parts of a table are the whole table's: the Ray engine adds its blocks').
    """
    fns = spec.functions
    aggs = ["count(*)", "count_if(" + " OR ".join(f"__lf{i}" for i in range(len(fns))) + ")"]
    for i, fn in enumerate(fns):
        rivals = [f"__lf{j}" for j, o in enumerate(fns) if o.label != fn.label]
        clash = f" AND ({' OR '.join(rivals)})" if rivals else " AND false"
        aggs += [f"count_if(__lf{i})", f"count_if(__lf{i}{clash})"]
    return aggs


def stats_from_counts(counts: list[int], spec: LabelSpec) -> dict[str, Any]:
    """:func:`function_stats` from the values of :func:`stats_aggregates`."""
    n, covered = counts[0], counts[1]

    def share(k: int) -> float:
        return round(k / n, 6) if n else 0.0

    per_fn = {
        fn.name: {
            "fires": counts[2 + 2 * i],
            "coverage": share(counts[2 + 2 * i]),
            "conflicts": counts[3 + 2 * i],
            "conflict_rate": share(counts[3 + 2 * i]),
        }
        for i, fn in enumerate(spec.functions)
    }
    return {"rows": n, "covered": covered, "coverage": share(covered), "functions": per_fn}
