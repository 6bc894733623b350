"""Issue 19, item 10: a keyed workspace that loses its key or anchors fails verification, and a
wiped log is told apart from an empty one.

Before: deleting ``audit.key`` and the anchors file and rewriting every event with plain hashes
verified as intact; so did wiping every event, the head and the anchors.
"""

from __future__ import annotations

import pytest
from tests.unit.core.test_audit_keyed import _events, _rehash_all, _sql

from aifab.core import audit, audit_keys, verify_audit


def test_losing_the_key_and_anchors_then_rehashing_is_detected() -> None:
    _events(3)
    audit_keys.key_path().unlink()
    audit_keys.anchor_path().unlink()
    _rehash_all()
    report = verify_audit()
    assert not report.ok
    assert any("audit key" in p and "missing" in p for p in report.problems), report.problems


def test_a_wiped_log_is_not_an_empty_one() -> None:
    assert verify_audit().ok  # a fresh workspace: empty, nothing to miss
    _events(3)
    _sql("DELETE FROM audit_events")
    _sql("DELETE FROM audit_head")
    audit_keys.anchor_path().unlink()
    report = verify_audit()
    assert not report.ok and report.events == 0
    assert any("wiped" in p for p in report.problems), report.problems


def test_an_anchor_of_an_empty_workspace_verifies() -> None:
    audit.write_anchor()
    assert verify_audit().ok


def test_a_configured_key_that_goes_missing_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIFAB_AUDIT_KEY", "a configured secret")
    _events(2)
    assert verify_audit().ok
    monkeypatch.delenv("AIFAB_AUDIT_KEY")
    audit_keys.anchor_path().unlink()
    _rehash_all()
    report = verify_audit()
    assert not report.ok
    assert any("audit key" in p and "missing" in p for p in report.problems), report.problems
