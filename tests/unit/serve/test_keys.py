"""API keys: hashed storage, shown-once secrets, roles, rate/quota parsing, revocation, audit."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from sqlalchemy import select

from aifab.core.audit import list_events
from aifab.core.db import session_scope
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.serve.keys import (
    MAX_TOKEN_QUOTA,
    PERMISSIONS,
    ROLES,
    KeyInfo,
    authenticate,
    create_key,
    list_keys,
    parse_quota,
    parse_rate,
    revoke_key,
)
from aifab.serve.tables import ApiKeyRow


def test_roles_and_permissions() -> None:
    assert ROLES == ("admin", "developer", "viewer", "client")
    assert PERMISSIONS["admin"] == {"invoke", "read", "deploy", "ingest", "keys"}
    assert PERMISSIONS["developer"] == {"invoke", "read", "deploy", "ingest"}
    assert PERMISSIONS["viewer"] == {"read"}
    assert PERMISSIONS["client"] == {"invoke", "ingest"}


@pytest.mark.parametrize(
    ("text", "per_min"),
    [
        ("600/min", 600.0),
        ("10/s", 600.0),
        ("1000/h", 1000 / 60),
        ("1440/day", 1.0),
        ("30", 30.0),
        (120, 120.0),
        ("none", None),
        (None, None),
    ],
)
def test_parse_rate(text: object, per_min: float | None) -> None:
    result = parse_rate(text)  # type: ignore[arg-type]
    if per_min is None:
        assert result is None
    else:
        assert result == pytest.approx(per_min)


@pytest.mark.parametrize(
    "bad",
    [
        "0/min",
        "-5/min",
        "ten/min",
        "5/fortnight",
        "inf/min",
        "/min",
        "1e308/s",
        "nan/s",
        "1e12/s",
        "1e-300/s",  # issue 19 item 13: accepted, then a 301-digit Retry-After
        "0.5/day",
    ],
)
def test_parse_rate_rejects(bad: str) -> None:
    with pytest.raises(InvalidInputError, match="rate"):
        parse_rate(bad)


def test_parse_quota() -> None:
    assert parse_quota("1000/day") == 1000
    assert parse_quota("1000") == 1000
    assert parse_quota(50) == 50
    assert parse_quota("none") is None
    assert parse_quota(f"{MAX_TOKEN_QUOTA}/day") == MAX_TOKEN_QUOTA
    assert parse_rate("1/day") == pytest.approx(1 / 1440)
    # issue 19 item 13: a 23-digit quota was stored and overflowed the DB (HTTP 500)
    too_big = ("99999999999999999999999/day", 10**23, "9" * 5000, MAX_TOKEN_QUOTA + 1, "²")
    for bad in ("0", "-1/day", "10/hour", "lots", True, *too_big):
        with pytest.raises(InvalidInputError, match="token quota"):
            parse_quota(bad)  # type: ignore[arg-type]


def test_create_stores_only_the_hash_and_authenticates() -> None:
    key, secret = create_key("client", name="app", rate="10/s", token_quota="5000/day")
    assert secret.startswith("aifab-") and len(secret) > 40
    assert key["prefix"] == secret[:12] and key["role"] == "client" and key["active"]
    assert key["rate_per_min"] == 600.0 and key["token_quota_day"] == 5000
    assert "hash" not in key and secret not in str(key)
    with session_scope() as s:
        row = s.scalar(select(ApiKeyRow))
        assert row is not None
        stored = [str(v) for v in (row.id, row.name, row.prefix, row.hash, row.role)]
        assert row.hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in stored

    info = authenticate(secret)
    assert info == KeyInfo(key["id"], "app", "client", 600.0, 5000)
    assert authenticate(secret + "x") is None
    assert authenticate("not-a-key") is None
    assert authenticate("") is None


def test_list_never_shows_hashes_and_revoke() -> None:
    a, secret_a = create_key("admin", name="ops", rate=None)
    b, _ = create_key("viewer")
    listed = list_keys()
    assert [k["id"] for k in listed] == [a["id"], b["id"]]
    assert all("hash" not in k and "secret" not in k for k in listed)
    assert listed[0]["rate_per_min"] is None and listed[1]["rate_per_min"] == 600.0

    revoked = revoke_key(a["id"])
    assert not revoked["active"] and revoked["revoked_at"] is not None
    assert authenticate(secret_a) is None
    assert revoke_key(a["id"])["revoked_at"] == revoked["revoked_at"]  # twice: no-op
    assert [k["id"] for k in list_keys(include_revoked=False)] == [b["id"]]
    with pytest.raises(NotFoundError, match="no API key 'key_nope'"):
        revoke_key("key_nope")


def test_bad_input_names_the_field() -> None:
    with pytest.raises(InvalidInputError, match="role 'root'"):
        create_key("root")
    with pytest.raises(InvalidInputError, match="name"):
        create_key("client", name="x" * 101)
    with pytest.raises(InvalidInputError, match="rate"):
        create_key("client", rate="fast")
    assert list_keys() == []


def test_changes_are_audited_without_the_secret() -> None:
    key, secret = create_key("developer", name="ci")
    revoke_key(key["id"])
    with session_scope() as s:
        events = [(e.action, e.object, e.params_digest) for e in list_events(s, action="key.")]
    assert [(a, o) for a, o, _ in events] == [
        ("key.revoke", f"key:{key['id']}"),
        ("key.create", f"key:{key['id']}"),
    ]
    assert all(secret not in d for _, _, d in events)


def test_dataset_grants_of_client_keys() -> None:
    from aifab.serve.keys import may_push, parse_datasets

    assert parse_datasets("sensors*, events,") == ("sensors*", "events")
    record, secret = create_key("client", name="iot", datasets="sensors*,events")
    assert record["datasets"] == ["sensors*", "events"]
    key = authenticate(secret)
    assert key is not None and key.datasets == ("sensors*", "events")
    assert may_push(key, "sensors_hall") and may_push(key, "events")
    assert not may_push(key, "events2") and not may_push(key, "payroll")
    _, bare = create_key("client", name="bare")
    bare_key = authenticate(bare)
    assert bare_key is not None and not may_push(bare_key, "sensors")
    _, dev = create_key("developer")
    dev_key = authenticate(dev)
    assert dev_key is not None and may_push(dev_key, "payroll")


@pytest.mark.parametrize("bad", ["x\n", "../etc", "a b*", "**"])
def test_dataset_grants_are_validated(bad: str) -> None:
    with pytest.raises(InvalidInputError, match="datasets"):
        create_key("client", datasets=bad)
    with pytest.raises(InvalidInputError, match="only client keys"):
        create_key("developer", datasets="sensors*")


def test_cli_creates_a_key_with_grants(cli: Any) -> None:
    result = cli("keys", "create", "--role", "client", "--datasets", "sensors*", "--json")
    assert result.exit_code == 0, result.stderr
    assert '"sensors*"' in result.stdout
    bad = cli("keys", "create", "--role", "client", "--datasets", "a b")
    assert bad.exit_code == 2 and "datasets" in bad.stderr
