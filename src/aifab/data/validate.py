"""Validation: run an expectation suite, quarantine failing rows, commit the passing ones.

Row rules run in one DuckDB pass that keeps only the failing rows (row number, which rules
failed, the row as JSON); the passing rows are then committed as a new version.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import duckdb

from aifab.core.config import as_config
from aifab.core.errors import InvalidInputError
from aifab.data import lake
from aifab.data.catalog import CommitResult, VersionInfo, commit_query, resolve
from aifab.data.clean import check_columns, describe, fetch
from aifab.data.clean_steps import RN
from aifab.data.expectations import (
    ExpectationSuite,
    Regex,
    RowCount,
    RowRule,
    Sql,
    columns_of,
)
from aifab.data.lake import sql_error, sql_ident, sql_string
from aifab.data.quarantine import QuarantineItem, quarantine
from aifab.data.sandbox import check_select

__all__ = ["ExpectationSuite", "RuleResult", "ValidationReport", "validate"]

_BASE = "__aifab_base"
_FAILED = "__aifab_failed"


@dataclass
class RuleResult:
    """How one rule fared."""

    name: str
    kind: str
    level: Literal["row", "dataset"]
    failed: int
    passed: bool
    detail: str = ""
    examples: list[dict[str, Any]] = field(default_factory=list)
    severity: Literal["error", "warn"] = "error"


@dataclass
class ValidationReport:
    """The outcome of :func:`validate`."""

    dataset: str
    passed: bool
    rows: int
    failed_rows: int
    quarantined: int
    rules: list[RuleResult]
    version: VersionInfo | None = None
    created: bool = False
    warned_rows: int = 0
    max_failure_share: float = 0.0
    #: Why the run failed (empty when it passed).
    reasons: list[str] = field(default_factory=list)

    @property
    def failure_share(self) -> float:
        """Share of rows that failed at least one error-level row rule."""
        return self.failed_rows / self.rows if self.rows else 0.0

    @property
    def warned(self) -> bool:
        """Whether any warn-level rule failed."""
        return any(not r.passed and r.severity == "warn" for r in self.rules)

    def judge(self) -> None:
        """Set ``passed`` and ``reasons`` from the rule results and the failure threshold."""
        self.reasons = [
            f"{r.name} failed ({r.detail})"
            for r in self.rules
            if r.level == "dataset" and r.severity == "error" and not r.passed
        ]
        if self.failure_share > self.max_failure_share:
            self.reasons.insert(
                0,
                f"{self.failed_rows} of {self.rows} rows failed error-level rules "
                f"({self.failure_share:.1%}, allowed {self.max_failure_share:.1%})",
            )
        self.passed = not self.reasons

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "dataset": self.dataset,
            "passed": self.passed,
            "rows": self.rows,
            "failed_rows": self.failed_rows,
            "failure_share": self.failure_share,
            "max_failure_share": self.max_failure_share,
            "warned_rows": self.warned_rows,
            "reasons": self.reasons,
            "quarantined": self.quarantined,
            "version": self.version.to_dict() if self.version else None,
            "created": self.created,
            "rules": [asdict(r) for r in self.rules],
        }


def _row_rules(
    con: duckdb.DuckDBPyConnection, suite: ExpectationSuite, types: Mapping[str, str]
) -> list[RowRule]:
    """Every row rule, checked to bind against the data (errors name the expectation)."""
    rules: list[RowRule] = []
    for i, e in enumerate(suite.expectations, start=1):
        where = f"expectation {i} ({e.op})"
        check_columns(where, types, columns_of(e))
        if isinstance(e, Regex):
            fetch(con, f"SELECT regexp_full_match('', {sql_string(e.pattern)})", where)
        for rule in e.row_rules(i):
            describe(con, f"SELECT {rule.fails} FROM {_BASE}", where)
            if any(r.name == rule.name for r in rules):
                raise InvalidInputError(f"{where}: rule name {rule.name!r} is used twice")
            rules.append(replace(rule, level=e.level))
    return rules


def _dataset_results(source: VersionInfo, suite: ExpectationSuite) -> list[RuleResult]:
    """Check row counts and ``assert`` queries (on their own connection: they see only data)."""
    results = []
    con = lake.connect(sandboxed=True)
    try:
        fetch(con, f"CREATE TEMP VIEW data AS SELECT * FROM {source.scan_sql()}", source.ref)
        for i, e in enumerate(suite.expectations, start=1):
            if isinstance(e, RowCount):
                ok = e.holds(source.num_rows)
                results.append(
                    RuleResult(
                        e.name or "row_count",
                        "row_count",
                        "dataset",
                        int(not ok),
                        ok,
                        f"{source.num_rows} rows",
                        severity=e.level,
                    )
                )
            elif isinstance(e, Sql) and e.assert_ is not None:
                asserted = check_select(e.assert_, f"expectation {i} (sql)")
                got = fetch(con, asserted, f"expectation {i} (sql)")
                ok = len(got) == 1 and len(got[0]) == 1 and got[0][0] is True
                shown = (
                    repr(got[0][0]) if len(got) == 1 and len(got[0]) == 1 else f"{len(got)} rows"
                )
                results.append(
                    RuleResult(
                        e.name or f"sql:{i}",
                        "sql",
                        "dataset",
                        int(not ok),
                        ok,
                        f"returned {shown}",
                        severity=e.level,
                    )
                )
    finally:
        con.close()
    return results


def _any(flags: list[str]) -> str:
    return " OR ".join(flags) if flags else "FALSE"


def _find_failures(
    con: duckdb.DuckDBPyConnection,
    rules: list[RowRule],
    columns: list[str],
    examples: int,
    where: str,
) -> tuple[int, int, list[RuleResult]]:
    """One pass keeping the failing rows in a temp table.

    Returns:
        Rows failing an error-level rule, rows failing a warn-level rule, and rule results.
        ``__err`` in the table marks the rows that fail an error-level rule.
    """
    select = failures_sql(rules, columns, _BASE, [r.fails for r in rules])
    fetch(con, f"CREATE TEMP TABLE {_FAILED} AS {select}", where)
    return failure_results(con, rules, examples)


def failures_sql(rules: list[RowRule], columns: list[str], base: str, fails: list[str]) -> str:
    """The SELECT of the failing rows of ``base``.

    Its columns: row number, a flag per rule (``fails``: the rules' SQL or what stands for
    it), ``__err`` (an error-level rule failed) and the row as JSON.
    """
    flags = [f"__aifab_f{i}" for i in range(len(rules))]
    errors = [f for r, f in zip(rules, flags, strict=True) if r.level == "error"]
    record = "{" + ", ".join(f"{sql_string(c)}: {sql_ident(c)}" for c in columns) + "}"
    inner = ", ".join(f"{f} AS {flag}" for f, flag in zip(fails, flags, strict=True))
    return (
        f"SELECT {sql_ident(RN)} AS rn, "
        f"{', '.join(flags)}, ({_any(errors)}) AS __err, to_json({record}) AS rec "
        f"FROM (SELECT *, {inner} FROM {base}) AS t WHERE {_any(flags)}"
    )


def failure_results(
    con: duckdb.DuckDBPyConnection, rules: list[RowRule], examples: int
) -> tuple[int, int, list[RuleResult]]:
    """Counts and examples per rule from the failing-rows table.

    The table holds the rows of :func:`failures_sql`; the Ray engine fills it from its blocks.
    """
    flags = [f"__aifab_f{i}" for i in range(len(rules))]
    warns = [f for r, f in zip(rules, flags, strict=True) if r.level == "warn"]
    counts = con.execute(
        f"SELECT count(*) FILTER (__err), count(*) FILTER ({_any(warns)}), "
        f"{', '.join(f'count(*) FILTER ({f})' for f in flags)} FROM {_FAILED}"
    ).fetchall()[0]
    results = []
    for rule, flag, n in zip(rules, flags, counts[2:], strict=True):
        shown = (
            con.execute(
                f"SELECT rn, rec FROM {_FAILED} WHERE {flag} ORDER BY rn LIMIT {examples}"
            ).fetchall()
            if n
            else []
        )
        results.append(
            RuleResult(
                rule.name,
                rule.kind,
                "row",
                int(n),
                n == 0,
                rule.reason,
                [{"line": rn, "record": json.loads(rec)} for rn, rec in shown],
                rule.level,
            )
        )
    return int(counts[0]), int(counts[1]), results


def _items(con: duckdb.DuckDBPyConnection, rules: list[RowRule]) -> Iterator[QuarantineItem]:
    flags = ", ".join(f"__aifab_f{i}" for i in range(len(rules)))
    cursor = con.execute(f"SELECT rn, rec, {flags} FROM {_FAILED} WHERE __err ORDER BY rn")
    while chunk := cursor.fetchmany(10_000):
        for rn, rec, *failed in chunk:
            row = json.loads(rec)
            for rule, bad in zip(rules, failed, strict=True):
                if bad and rule.level == "error":
                    reason = (
                        f"{rule.column}={row.get(rule.column)!r} {rule.reason}"
                        if rule.column
                        else rule.reason
                    )
                    yield QuarantineItem(rule.name, reason, row, rn)


def judged_report(
    source: VersionInfo,
    suite: ExpectationSuite,
    found: tuple[int, int, list[RuleResult]],
    output: str | None,
) -> tuple[ValidationReport, bool]:
    """The judged report of ``found`` (failed rows, warned rows, rule results).

    Also whether the passing rows are to be committed (a passing run with failures, or a
    new dataset).
    """
    failed, warned, results = found
    report = ValidationReport(
        source.ref,
        True,
        source.num_rows,
        failed,
        0,
        results,
        warned_rows=warned,
        max_failure_share=suite.max_failure_share,
    )
    report.judge()
    renamed = output is not None and output != source.dataset
    if not report.passed or (failed and suite.on_failure == "report"):
        return report, False
    if not failed and not renamed:
        report.version = source
        return report, False
    return report, True


def validate_transform(suite: ExpectationSuite, report: ValidationReport) -> dict[str, Any]:
    """The lineage record of the passing rows' version."""
    return {
        "kind": "validate",
        "suite": suite.to_yaml_dict(),
        "failed_rows": report.failed_rows,
        "rules": {r.name: r.failed for r in report.rules},
    }


def record_commit(
    report: ValidationReport,
    result: CommitResult,
    con: duckdb.DuckDBPyConnection,
    rules: list[RowRule],
    source: VersionInfo,
) -> None:
    """Put the commit in the report and quarantine the failing rows (of ``con``'s table)."""
    report.version, report.created = result.version, result.created
    if result.created and report.failed_rows:
        report.quarantined = quarantine(
            source.dataset, "validate", _items(con, rules), version_id=source.id
        )
        if result.version.dataset != source.dataset:  # findable under either name
            quarantine(result.version.dataset, "validate", _items(con, rules), version_id=source.id)


def validate(
    ref: str,
    spec: ExpectationSuite | Path | str | Mapping[str, Any],
    *,
    output: str | None = None,
) -> ValidationReport:
    """Check a dataset version against an expectation suite (semantics: :class:`ExpectationSuite`).

    Args:
        ref: the input, ``NAME`` or ``NAME@VERSION``.
        spec: an :class:`ExpectationSuite`, a path to its YAML, or a mapping.
        output: dataset for the passing rows (default: a new version of the input dataset).
            When given, the passing rows are committed there even if no row failed, and
            quarantined rows are stored under both the input's and the output's name.

    Returns:
        The report; ``version`` is the version holding the passing rows (the input itself when
        nothing failed), or None when the run failed or ``on_failure`` is ``report``. A failed
        run (``passed`` False, ``reasons`` saying why) commits and quarantines nothing.
    """
    suite = as_config(ExpectationSuite, spec, source="expectation suite")
    source = resolve(ref)
    if suite.engine == "ray":
        from aifab.data.engines.ray_validate import validate_on_ray

        return validate_on_ray(source, suite, output)
    con = lake.connect(sandboxed=True)
    try:
        fetch(con, f"CREATE TEMP VIEW data AS SELECT * FROM {source.scan_sql()}", source.ref)
        fetch(
            con,
            f"CREATE TEMP VIEW {_BASE} AS "
            f"SELECT *, row_number() OVER () AS {sql_ident(RN)} FROM data",
            source.ref,
        )
        types = describe(con, "SELECT * FROM data", source.ref)
        columns = list(types)
        rules = _row_rules(con, suite, types)
        failed, warned, results = (
            _find_failures(con, rules, columns, suite.examples, f"validate {source.ref}")
            if rules
            else (0, 0, [])
        )
        results += _dataset_results(source, suite)
        report, commit = judged_report(source, suite, (failed, warned, results), output)
        if not commit:
            return report
        keep = (
            f"SELECT {', '.join(sql_ident(c) for c in columns)} FROM {_BASE} AS b "
            + (
                f"ANTI JOIN (SELECT rn FROM {_FAILED} WHERE __err) AS f "
                f"ON b.{sql_ident(RN)} = f.rn "
                if rules
                else ""
            )
            + f"ORDER BY b.{sql_ident(RN)}"
        )
        result = commit_query(
            output or source.dataset,
            keep,
            source=f"validate({source.ref})",
            transform=validate_transform(suite, report),
            parents=[source],
            con=con,
        )
        record_commit(report, result, con, rules, source)
        return report
    except duckdb.Error as exc:
        raise sql_error(f"validate {source.ref}", exc) from None
    finally:
        con.close()
