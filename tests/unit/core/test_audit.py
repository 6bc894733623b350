from __future__ import annotations

from sqlalchemy import text

from aifab.core import acting_as, audit_events, get_engine, session_scope, verify_audit
from aifab.core.audit import record_event


def _events(n: int) -> None:
    for i in range(n):
        with session_scope() as s:
            record_event(s, "thing.create", f"thing:{i}", {"i": i})


def test_chain_verifies_and_records_actor(cli) -> None:
    with acting_as("key:abc"):
        _events(3)
    assert verify_audit().ok
    assert [e["actor"] for e in audit_events()] == ["key:abc"] * 3
    r = cli("audit", "verify")
    assert r.exit_code == 0 and "3 events" in r.stdout
    r = cli("audit", "list", "--json")
    assert '"thing.create"' in r.stdout


def test_default_actor_comes_from_env() -> None:
    _events(1)
    assert audit_events()[0]["actor"] == "user:test"


def _sql(stmt: str) -> None:
    with get_engine().begin() as conn:
        conn.execute(text(stmt))


def test_edited_event_is_detected(cli) -> None:
    _events(3)
    _sql("UPDATE audit_events SET actor='mallory' WHERE id=2")
    report = verify_audit()
    assert not report.ok
    assert any("event 2" in p and "edited" in p for p in report.problems)
    r = cli("audit", "verify")
    assert r.exit_code == 3
    assert r.stderr.startswith("error: audit chain broken")


def test_deleted_middle_event_is_detected() -> None:
    _events(4)
    _sql("DELETE FROM audit_events WHERE id=2")
    report = verify_audit()
    assert not report.ok
    assert any("event 3: chain broken" in p for p in report.problems)


def test_deleted_newest_event_is_detected() -> None:
    _events(3)
    _sql("DELETE FROM audit_events WHERE id=3")
    report = verify_audit()
    assert not report.ok
    assert any("rows deleted" in p for p in report.problems)
