from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aifab.core.errors import InvalidInputError
from aifab.data import lake
from aifab.data.catalog import VersionInfo, commit_query, list_versions, resolve
from aifab.data.quarantine import count_quarantine, list_quarantine
from aifab.data.validate import ExpectationSuite, validate

USERS = """SELECT * FROM (VALUES
  (1, 'a@x.com', 30, 'US'),
  (2, NULL, 150, 'FR'),
  (1, 'bad', 40, 'XX'),
  (NULL, 'c@x.com', NULL, NULL),
  (4, 'd@x.com', -1, 'US'),
  (5, 'e@x.com', 50, 'FR')
) t(id, email, age, country)"""

SUITE: dict[str, Any] = {
    "expectations": [
        {"not_null": {"columns": ["id", "email"]}},
        {"unique": {"columns": ["id"]}},
        {"between": {"column": "age", "min": 0, "max": 120}},
        {"in_set": {"column": "country", "values": ["US", "FR"]}},
        {"regex": {"column": "email", "pattern": "[^@]+@[^@]+"}},
        {"row_count": {"min": 1, "max": 100}},
        {"sql": {"where": "age <> 40", "name": "not_forty"}},
        {"sql": {"assert": "SELECT count(DISTINCT country) = 3 FROM data"}},
    ],
    # Quarantine failing rows and keep going (the default, 0.0, fails on any failing row).
    "max_failure_share": 1.0,
}


def make() -> VersionInfo:
    return commit_query("users", USERS, source="test", transform={"kind": "test"}).version


def rows(v: VersionInfo) -> list[tuple[Any, ...]]:
    return lake.connect().execute(f"SELECT * FROM {v.scan_sql()}").fetchall()


def test_report_counts_examples_and_new_version() -> None:
    src = make()
    report = validate("users", SUITE)
    failed = {r.name: r.failed for r in report.rules}
    assert failed == {
        "not_null:id": 1,
        "not_null:email": 1,
        "unique:id": 1,
        "between:age": 2,
        "in_set:country": 1,
        "regex:email": 1,
        "not_forty": 2,
        "row_count": 0,
        "sql:8": 0,
    }
    assert report.passed and report.rows == 6 and report.failed_rows == 4
    between = next(r for r in report.rules if r.name == "between:age")
    assert [e["line"] for e in between.examples] == [2, 5]
    assert between.examples[0]["record"] == {"id": 2, "email": None, "age": 150, "country": "FR"}
    v = report.version
    assert v is not None and report.created and v.ref == "users@2" and v.parents == [src.ref]
    assert rows(v) == [(1, "a@x.com", 30, "US"), (5, "e@x.com", 50, "FR")]
    assert v.transform["kind"] == "validate" and v.transform["failed_rows"] == 4
    # Null age fails the custom predicate (a null is not "true").
    not_forty = next(r for r in report.rules if r.name == "not_forty")
    assert [e["line"] for e in not_forty.examples] == [3, 4]


def test_quarantine_once_per_rule_removed_once() -> None:
    src = make()
    report = validate("users", SUITE)
    assert report.quarantined == 9
    got = list_quarantine("users", stage="validate")
    line3 = sorted(r["rule"] for r in got if r["line"] == 3)
    assert line3 == ["in_set:country", "not_forty", "regex:email", "unique:id"]
    rec = next(r for r in got if r["rule"] == "in_set:country")
    assert rec["record"] == {"id": 1, "email": "bad", "age": 40, "country": "XX"}
    assert rec["reason"] == "country='XX' not in the allowed set"
    assert rec["version_id"] == src.id
    assert count_quarantine("users")["not_null:id"] == 1
    # Re-validating the same version makes no new version and quarantines nothing twice.
    again = validate("users@1", SUITE)
    assert not again.created and again.quarantined == 0
    assert len(list_quarantine("users", limit=1000)) == 9


def test_unique_flags_every_repeat_after_the_first() -> None:
    commit_query(
        "k",
        "SELECT * FROM (VALUES (1, 'a'), (2, 'b'), (1, 'c'), (1, 'd'), (NULL, 'e'),"
        " (NULL, 'f')) t(k, v)",
        source="test",
        transform={"kind": "test"},
    )
    report = validate(
        "k", {"expectations": [{"unique": {"columns": ["k"]}}], "max_failure_share": 0.5}
    )
    assert report.rules[0].failed == 2
    assert [e["line"] for e in report.rules[0].examples] == [3, 4]
    assert report.version is not None
    assert [r[1] for r in rows(report.version)] == ["a", "b", "e", "f"]


def test_clean_data_keeps_input_version() -> None:
    src = make()
    report = validate("users", {"expectations": [{"between": {"column": "age", "min": -5}}]})
    assert report.passed and report.version == src and not report.created
    assert [v.version for v in list_versions("users")] == [1]
    report = validate(
        "users",
        {
            "expectations": [
                {"row_count": {"min": 6}},
                {"not_null": {"columns": ["country"], "name": "has_country"}},
            ],
            "max_failure_share": 0.2,
        },
    )
    assert report.rules[0].name == "has_country" and report.rules[0].failed == 1
    assert report.version is not None and report.version.num_rows == 5


def test_report_mode_and_failing_runs_commit_nothing() -> None:
    make()
    report = validate("users", {**SUITE, "on_failure": "report"})
    assert report.passed and report.version is None and report.quarantined == 0
    report = validate("users", {**SUITE, "max_failure_share": 0.5})
    assert not report.passed and report.version is None
    assert report.failure_share == pytest.approx(4 / 6)
    report = validate(
        "users", {"expectations": [{"row_count": {"min": 10}}, {"not_null": {"columns": ["id"]}}]}
    )
    assert not report.passed and report.rules[1].detail == "6 rows"
    assert [v.version for v in list_versions("users")] == [1]
    assert list_quarantine("users") == []


def test_output_dataset_and_to_dict() -> None:
    make()
    suite = ExpectationSuite.model_validate({"expectations": [{"row_count": {"max": 10}}]})
    report = validate("users", suite, output="checked")
    assert report.version is not None and report.version.ref == "checked@1"
    assert report.version.parents == ["users@1"]
    d = report.to_dict()
    assert d["passed"] is True and d["version"]["ref"] == "checked@1"
    json.dumps(d)


def test_bad_suites_name_the_problem() -> None:
    make()
    bad = [
        ({"expectations": [{"sql": {"asert": "x"}}]}, "expectations.0.sql.asert: unknown key"),
        ({"expectations": [{"not_nul": {"columns": ["id"]}}]}, "unknown expectation 'not_nul'"),
        ({"expectations": [{"between": {"column": "age"}}]}, "give 'min', 'max' or both"),
        (
            {"expectations": [{"between": {"column": "zz", "min": 1}}]},
            r"expectation 1 \(between\): unknown column 'zz'",
        ),
        ({"expectations": [{"sql": {"where": "nope > 1"}}]}, r"expectation 1 \(sql\): SQL error"),
        (
            {"expectations": [{"row_count": {}}, {"sql": {"assert": "SELEC 1"}}]},
            r"expectation 2 \(sql\): SQL error",
        ),
        ({"expectations": [{"regex": {"column": "email", "pattern": "("}}]}, "SQL error"),
        (
            {
                "expectations": [
                    {"not_null": {"columns": ["id"]}},
                    {"not_null": {"columns": ["id"]}},
                ]
            },
            "'not_null:id' is used twice",
        ),
    ]
    for spec, message in bad:
        with pytest.raises(InvalidInputError, match=message):
            validate("users", spec)


def test_cli_validate_table_json_and_exit_codes(cli, tmp_path: Path) -> None:
    make()
    ok = tmp_path / "ok.yaml"
    ok.write_text(
        "expectations:\n  - not_null: {columns: [email]}\n  - row_count: {min: 1}\n"
        "max_failure_share: 0.5\n"
    )
    r = cli("data", "validate", "users", "-f", ok)
    assert r.exit_code == 0, r.stderr
    assert "not_null:email" in r.stdout and "PASSED" in r.stdout and "users@2" in r.stdout
    failing = tmp_path / "failing.yaml"
    failing.write_text("expectations:\n  - row_count: {min: 100}\n")
    r = cli("data", "validate", "users@1", "-f", failing, "--json")
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    assert out["passed"] is False and out["rules"][0]["name"] == "row_count"
    r = cli("data", "validate", "users@1", "-f", failing)
    assert r.exit_code == 1 and "FAILED" in r.stdout
    failing.write_text("expectations:\n  - sql: {assert: 'SELECT * FROM nowhere'}\n")
    r = cli("data", "validate", "users", "-f", failing)
    assert r.exit_code == 2 and "SQL error" in r.stderr and "Traceback" not in r.stderr
    r = cli("data", "validate", "ghost", "-f", ok)
    assert r.exit_code == 1 and "not found" in r.stderr


def test_cli_quarantine_lists_rows(cli) -> None:
    make()
    validate(
        "users", {"expectations": [{"not_null": {"columns": ["email"]}}], "max_failure_share": 1}
    )
    r = cli("data", "quarantine", "users", "--stage", "validate", "--json")
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert [(q["rule"], q["line"]) for q in out] == [("not_null:email", 2)]
    assert out[0]["record"]["age"] == 150
    r = cli("data", "quarantine", "users", "--limit", "5")
    assert r.exit_code == 0 and "not_null:email" in r.stdout
    r = cli("data", "quarantine", "users", "--stage", "ingest", "--json")
    assert json.loads(r.stdout) == []
    assert resolve("users").ref == "users@2"
