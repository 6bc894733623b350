"""Validation fails loudly: error-level failures fail the run (threshold), warn-level ones only
report; regex match modes are explicit; quarantined rows are found under the output name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aifab.core.errors import InvalidInputError
from aifab.data.catalog import VersionInfo, commit_query, list_versions
from aifab.data.quarantine import list_quarantine
from aifab.data.splits import split
from aifab.data.validate import validate


def _codes(n: int = 967) -> VersionInfo:
    """Shaped like the report's file: every code is lower case, the rule wants upper case."""
    return commit_query(
        "codes",
        f"SELECT range AS id, 'ab' || range AS code FROM range({n})",
        source="test",
        transform={"kind": "test"},
    ).version


UPPER = {"expectations": [{"regex": {"column": "code", "pattern": "[A-Z]+[0-9]+"}}]}


def test_every_row_failing_fails_the_run_and_commits_nothing() -> None:
    _codes()
    report = validate("codes", UPPER)
    assert not report.passed and report.failed_rows == 967
    assert report.version is None and not report.created
    assert any("967 of 967 rows" in r for r in report.reasons)
    assert [v.version for v in list_versions("codes")] == [1]
    assert list_quarantine("codes") == []


def test_cli_validate_all_rows_failing_exits_non_zero(cli, tmp_path: Path) -> None:
    _codes()
    suite = tmp_path / "suite.yaml"
    suite.write_text("expectations:\n  - regex: {column: code, pattern: '[A-Z]+[0-9]+'}\n")
    r = cli("data", "validate", "codes", "-f", suite)
    assert r.exit_code == 1
    assert "PASSED" not in r.stdout
    assert "FAILED: 967 of 967 rows failed error-level rules" in r.stdout
    assert "nothing committed" in r.stdout
    assert [v.version for v in list_versions("codes")] == [1]


def test_failure_threshold_allows_some_failing_rows() -> None:
    _codes(10)
    suite = {
        "expectations": [{"sql": {"where": "id <> 3"}}],
        "max_failure_share": 0.2,
    }
    report = validate("codes", suite)
    assert report.passed and report.failed_rows == 1 and report.quarantined == 1
    assert report.version is not None and report.version.num_rows == 9
    strict = validate("codes@1", {"expectations": [{"sql": {"where": "id <> 3"}}]})
    assert not strict.passed and strict.version is None
    assert strict.reasons == ["1 of 10 rows failed error-level rules (10.0%, allowed 0.0%)"]


def test_warn_level_only_reports(cli, tmp_path: Path) -> None:
    src = _codes(10)
    suite = {
        "expectations": [
            {"regex": {"column": "code", "pattern": "[A-Z]+[0-9]+", "level": "warn"}},
            {"row_count": {"min": 100, "level": "warn"}},
            {"not_null": {"columns": ["id"]}},
        ]
    }
    report = validate("codes", suite)
    assert report.passed and report.failed_rows == 0 and report.warned_rows == 10
    assert report.version == src and report.quarantined == 0
    assert [(r.name, r.severity, r.passed) for r in report.rules] == [
        ("regex:code", "warn", False),
        ("not_null:id", "error", True),
        ("row_count", "warn", False),
    ]
    spec = tmp_path / "s.yaml"
    spec.write_text("expectations:\n  - regex: {column: code, pattern: '[A-Z]+', level: warn}\n")
    r = cli("data", "validate", "codes", "-f", spec)
    assert r.exit_code == 0 and "PASSED with warnings" in r.stdout and "warn" in r.stdout


def test_regex_match_modes() -> None:
    commit_query(
        "mails",
        "SELECT * FROM (VALUES ('a@x.com'), ('x a@x.com y'), ('nope')) t(email)",
        source="test",
        transform={"kind": "test"},
    )
    full = {"regex": {"column": "email", "pattern": "[a-z]+@[a-z]+\\.com"}}
    partial = {"regex": {**full["regex"], "match": "partial"}}
    report = validate("mails", {"expectations": [full], "on_failure": "report"})
    assert report.failed_rows == 2
    assert "full match" in report.rules[0].detail
    report = validate("mails", {"expectations": [partial], "on_failure": "report"})
    assert report.failed_rows == 1
    assert "partial match" in report.rules[0].detail
    with pytest.raises(InvalidInputError, match="match"):
        validate("mails", {"expectations": [{"regex": {**full["regex"], "match": "some"}}]})


def test_quarantine_is_found_under_the_output_name(cli) -> None:
    _codes(10)
    suite = {"expectations": [{"sql": {"where": "id < 8"}}], "max_failure_share": 0.5}
    report = validate("codes", suite, output="codes_ok")
    assert report.passed and report.version is not None and report.version.ref == "codes_ok@1"
    assert sorted(q["line"] for q in list_quarantine("codes_ok")) == [9, 10]
    assert sorted(q["line"] for q in list_quarantine("codes")) == [9, 10]
    r = cli("data", "quarantine", "codes_ok", "--json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)) == 2


def test_split_of_an_empty_dataset_fails_clearly(cli) -> None:
    commit_query(
        "empty",
        "SELECT range AS id FROM range(5) WHERE false",
        source="test",
        transform={"kind": "test"},
    )
    with pytest.raises(InvalidInputError, match="empty@1 has no rows"):
        split("empty")
    r = cli("data", "split", "empty")
    assert r.exit_code == 2 and "has no rows" in r.stderr
    assert [v.version for v in list_versions("empty")] == [1]
