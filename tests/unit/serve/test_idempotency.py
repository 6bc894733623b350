"""The ``Idempotency-Key`` store: what a second request with a key finds, and expiry at 24 h."""

from __future__ import annotations

from aifab.core.db import session_scope
from aifab.serve import idempotency
from aifab.serve.tables import IdempotentRequestRow


def test_a_reserved_key_is_running_then_answered_then_refused_for_another_request() -> None:
    first = idempotency.fingerprint("POST /v1/datasets/a/records", b'{"records": [{"x": 1}]}')
    other = idempotency.fingerprint("POST /v1/datasets/a/records", b'{"records": [{"x": 2}]}')
    assert idempotency.reserve("key_1", "k", first) is None
    assert idempotency.reserve("key_1", "k", first) == idempotency.Prior(True, None, None)
    idempotency.finish("key_1", "k", 200, {"accepted": 1})
    assert idempotency.reserve("key_1", "k", first) == idempotency.Prior(True, 200, {"accepted": 1})
    assert idempotency.reserve("key_1", "k", other) == idempotency.Prior(
        False, 200, {"accepted": 1}
    )
    assert idempotency.reserve("key_2", "k", other) is None  # another API key's own space


def test_an_abandoned_reservation_lets_a_retry_run_but_an_answer_stays() -> None:
    print_ = idempotency.fingerprint("POST /x", b"{}")
    assert idempotency.reserve("key_1", "gone", print_) is None
    idempotency.abandon("key_1", "gone")
    assert idempotency.reserve("key_1", "gone", print_) is None
    idempotency.finish("key_1", "gone", 202, {"sealing": True})
    idempotency.abandon("key_1", "gone")  # an answered request is never dropped
    assert idempotency.reserve("key_1", "gone", print_) == idempotency.Prior(
        True, 202, {"sealing": True}
    )


def test_keys_expire_after_a_day() -> None:
    print_ = idempotency.fingerprint("POST /x", b"{}")
    assert idempotency.reserve("key_1", "old", print_) is None
    idempotency.finish("key_1", "old", 200, {"accepted": 1})
    with session_scope() as s:
        row = s.get(IdempotentRequestRow, ("key_1", "old"))
        assert row is not None
        row.created_at -= idempotency.TTL_S + 1  # as if a day had passed
    assert idempotency.reserve("key_1", "old", print_) is None  # a new request, not a replay
