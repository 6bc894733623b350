"""The audit chain holds against someone who can write the DB but not read the key: events are
HMAC-keyed, and anchors (head hashes appended to a file) catch a deleted tail."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from sqlalchemy import text

from aifab.core import audit, audit_keys, get_engine, session_scope, verify_audit
from aifab.core.audit import record_event
from aifab.core.ids import canonical_json


def _events(n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        with session_scope() as s:
            record_event(s, "thing.create", f"thing:{i}", {"i": i})


def _sql(stmt: str, **params: object) -> list:
    with get_engine().begin() as conn:
        result = conn.execute(text(stmt), params)
        return list(result) if result.returns_rows else []


def _unkeyed(prev: str, ts: float, actor: str, action: str, obj: str, pd: str) -> str:
    """The hash anyone can compute: the old, unkeyed scheme (what an attacker has)."""
    payload = canonical_json([prev, repr(ts), actor, action, obj, pd])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _rehash_all() -> None:
    """Recompute every hash and the head after an edit, as a DB writer without the key can."""
    prev = "0" * 64
    rows = _sql("SELECT id, ts, actor, action, object, params_digest FROM audit_events ORDER BY id")
    _sql("UPDATE audit_events SET prev_hash = 'tmp' || id")  # dodge the unique constraint
    for id_, ts, actor, action, obj, pd in rows:
        h = _unkeyed(prev, ts, actor, action, obj, pd)
        _sql("UPDATE audit_events SET prev_hash=:p, hash=:h WHERE id=:i", p=prev, h=h, i=id_)
        prev = h
    _sql("UPDATE audit_head SET count=:c, hash=:h WHERE id = 1", c=len(rows), h=prev)


def test_rehashed_chain_after_an_edit_is_detected(cli) -> None:
    _events(4)
    assert verify_audit().ok
    _sql("UPDATE audit_events SET actor='mallory' WHERE id=2")
    _rehash_all()
    report = verify_audit()
    assert not report.ok
    assert any("key" in p for p in report.problems), report.problems
    r = cli("audit", "verify")
    assert r.exit_code == 3


def test_deleted_tail_with_updated_head_is_detected_by_the_anchor(cli) -> None:
    _events(3)
    r = cli("audit", "anchor")
    assert r.exit_code == 0 and "3 events" in r.stdout
    _events(1, start=3)
    last = _sql("SELECT id, prev_hash FROM audit_events ORDER BY id DESC LIMIT 2")
    # Delete the two newest events (one anchored) and point the head at what is left.
    _sql("DELETE FROM audit_events WHERE id >= :i", i=last[1][0])
    _sql("UPDATE audit_head SET count=2, hash=:h WHERE id = 1", h=last[1][1])
    report = verify_audit()
    assert not report.ok
    assert any("anchor" in p and "3" in p for p in report.problems), report.problems


def test_anchors_are_written_every_n_events(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit, "ANCHOR_EVERY", 5)
    _events(11)
    lines = audit_keys.anchor_path().read_text().splitlines()
    counts = [json.loads(line)["count"] for line in lines]
    assert counts == [1, 5, 10]
    last = _sql("SELECT id, prev_hash FROM audit_events ORDER BY id DESC LIMIT 2")
    _sql("DELETE FROM audit_events WHERE id = :i", i=last[0][0])
    _sql("UPDATE audit_head SET count=10, hash=:h WHERE id = 1", h=last[0][1])
    # The newest anchor (10 events) still holds: a tail after it is not detectable.
    assert verify_audit().ok
    _sql("DELETE FROM audit_events WHERE id = :i", i=last[1][0])
    _sql("UPDATE audit_head SET count=9, hash=:h WHERE id = 1", h=last[1][1])
    assert not verify_audit().ok


def test_forged_or_removed_anchor_file_is_detected() -> None:
    _events(2)
    path = audit_keys.anchor_path()
    line = json.loads(path.read_text().splitlines()[-1])
    path.write_text(json.dumps({**line, "count": 2}) + "\n")
    report = verify_audit()
    assert any("anchor line 1" in p for p in report.problems), report.problems
    path.unlink()
    report = verify_audit()
    assert any("no anchor" in p for p in report.problems), report.problems


def test_key_file_is_owner_only_and_env_key_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    _events(1)
    mode = stat.S_IMODE(os.stat(audit_keys.key_path()).st_mode)
    assert mode == 0o600
    assert verify_audit().ok
    monkeypatch.setenv("AIFAB_AUDIT_KEY", "another secret")
    report = verify_audit()  # the events were keyed with the file's key
    assert not report.ok


def test_unkeyed_events_of_an_old_workspace_still_verify() -> None:
    # An existing workspace: events written before keying, no key file, no anchors.
    prev = "0" * 64
    for i in range(3):
        ts = 1_700_000_000.0 + i
        h = _unkeyed(prev, ts, "user:old", "thing.create", f"thing:{i}", "d" * 64)
        _sql(
            "INSERT INTO audit_events (ts, actor, action, object, params_digest, prev_hash, hash) "
            "VALUES (:ts, 'user:old', 'thing.create', :o, :pd, :p, :h)",
            ts=ts,
            o=f"thing:{i}",
            pd="d" * 64,
            p=prev,
            h=h,
        )
        prev = h
    _sql("INSERT INTO audit_head (id, count, hash) VALUES (1, 3, :h)", h=prev)
    report = verify_audit()
    assert report.ok, report.problems
    _events(2)  # keyed from here on; the first anchor records the 3 unkeyed events
    report = verify_audit()
    assert report.ok, report.problems
    assert json.loads(audit_keys.anchor_path().read_text().splitlines()[0])["unkeyed"] == 3
    # Editing an unkeyed event and recomputing the unkeyed hashes breaks the keyed link.
    _sql("UPDATE audit_events SET actor='mallory' WHERE id=1")
    _rehash_all()
    assert not verify_audit().ok


def test_exported_anchor_catches_a_truncated_anchor_file(cli, tmp_path: Path) -> None:
    _events(3)
    export = tmp_path / "anchors-offsite.jsonl"
    r = cli("audit", "anchor", "--export", export)
    assert r.exit_code == 0 and export.exists()
    # Rewind: drop the newest event, fix the head, and drop the anchor written for it.
    last = _sql("SELECT id, prev_hash FROM audit_events ORDER BY id DESC LIMIT 1")
    _sql("DELETE FROM audit_events WHERE id = :i", i=last[0][0])
    _sql("UPDATE audit_head SET count=2, hash=:h WHERE id = 1", h=last[0][1])
    path = audit_keys.anchor_path()
    path.write_text(path.read_text().splitlines()[0] + "\n")
    assert verify_audit().ok  # the workspace's anchors were rewound too
    r = cli("audit", "verify", "--anchors", export)
    assert r.exit_code == 3 and "anchor" in r.stderr
