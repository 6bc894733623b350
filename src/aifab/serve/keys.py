"""API keys of the gateway: roles and permissions, creation (shown once), listing, revocation.

Only a key's SHA-256 is stored, so looking a secret up by its hash is the comparison, and a
leaked database leaks no usable key.
"""

from __future__ import annotations

import hashlib
import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select

from aifab.core.actor import current_actor
from aifab.core.audit import record_event
from aifab.core.db import session_scope
from aifab.core.errors import InvalidInputError, NotFoundError
from aifab.core.id_prefix import complete_id
from aifab.core.ids import new_id
from aifab.core.names import LABEL, NAME, TEAM, is_full_match
from aifab.serve.tables import ApiKeyRow, UiSessionRow

__all__ = [
    "PERMISSIONS",
    "ROLES",
    "KeyInfo",
    "authenticate",
    "create_key",
    "get_key",
    "hash_secret",
    "key_info",
    "list_keys",
    "may_push",
    "parse_datasets",
    "parse_quota",
    "parse_rate",
    "revoke_key",
]

ROLES = ("admin", "developer", "viewer", "client")
#: What each role may do: clients call models and push data, viewers read, developers deploy,
#: admins also manage keys.
PERMISSIONS: dict[str, frozenset[str]] = {
    "admin": frozenset({"invoke", "read", "deploy", "ingest", "keys"}),
    "developer": frozenset({"invoke", "read", "deploy", "ingest"}),
    "viewer": frozenset({"read"}),
    "client": frozenset({"invoke", "ingest"}),
}
SECRET_PREFIX = "aifab-"
#: Characters of the secret kept in clear, so people can tell their keys apart.
PREFIX_CHARS = 12
_PER_MINUTE = {
    "s": 60.0,
    "sec": 60.0,
    "second": 60.0,
    "m": 1.0,
    "min": 1.0,
    "minute": 1.0,
    "h": 1 / 60,
    "hr": 1 / 60,
    "hour": 1 / 60,
    "d": 1 / 1440,
    "day": 1 / 1440,
}
_NONE = ("none", "unlimited", "")
#: The largest finite rate a key may have (one million requests a second).
MAX_RATE_PER_MIN = 60_000_000.0
#: The smallest rate a key may have (one request a day): slower would answer a Retry-After of
#: centuries; a key that should not call at all is revoked instead.
MIN_RATE_PER_MIN = 1 / 1440
#: The largest daily token quota (a million tokens a second all day, far under SQLite's and
#: PostgreSQL's 64-bit integers, so sums of usage never overflow); above it, use 'none'.
MAX_TOKEN_QUOTA = 10**11


@dataclass(frozen=True)
class KeyInfo:
    """What the gateway knows about an authenticated key (never the secret)."""

    id: str
    name: str
    role: str
    rate_per_min: float | None
    token_quota_day: int | None
    #: Dataset grants of a client key: names, or prefixes ending in ``*``.
    datasets: tuple[str, ...] = ()


def hash_secret(secret: str) -> str:
    """The stored form of a secret: its SHA-256, hex."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def parse_rate(rate: str | float | None) -> float | None:
    """A rate limit as requests per minute: ``600/min``, ``10/s``, ``1000/h``; ``none``: no limit.

    A bare number is per minute. Between 1/day and 1,000,000/s. A key may burst a minute's worth
    (``3/min``: 3 requests at once; see :mod:`aifab.serve.limits`).

    Raises:
        InvalidInputError: not ``N/unit`` with N > 0 and unit s, min, h or day.
    """
    if rate is None:
        return None
    if isinstance(rate, int | float) and not isinstance(rate, bool):
        number, unit = float(rate), "min"
    else:
        text = str(rate).strip().lower()
        if text in _NONE:
            return None
        amount, _, unit = text.partition("/")
        unit = unit.strip() or "min"
        try:
            number = float(amount)
        except ValueError:
            number = -1.0
    if unit not in _PER_MINUTE or not number > 0:
        raise InvalidInputError(
            f"rate {rate!r}: expected N/s, N/min, N/h or N/day with N > 0, or 'none'"
        )
    per_min = number * _PER_MINUTE[unit]
    # 1e308/s is finite but overflows to inf per minute; refuse it and absurd rates alike.
    if not math.isfinite(per_min) or per_min > MAX_RATE_PER_MIN:
        raise InvalidInputError(
            f"rate {rate!r}: at most {MAX_RATE_PER_MIN / 60:g}/s; use 'none' for no limit"
        )
    if per_min < MIN_RATE_PER_MIN * (1 - 1e-9):  # 1/day itself, rounded, still passes
        raise InvalidInputError(f"rate {rate!r}: at least 1/day; revoke a key to stop it")
    return per_min


def parse_datasets(datasets: str | Sequence[str] | None) -> tuple[str, ...]:
    """Dataset grants: ``sensors*,events`` or a list; each a dataset name or a prefix + ``*``.

    Raises:
        InvalidInputError: a grant that is neither (``*`` alone grants every dataset).
    """
    if datasets is None:
        return ()
    items = datasets.split(",") if isinstance(datasets, str) else list(datasets)
    grants: list[str] = []
    for item in items:
        grant = item.strip(" ") if isinstance(item, str) else item
        if grant == "":
            continue
        if grant != "*" and not is_full_match(NAME, str(grant).removesuffix("*")):
            raise InvalidInputError(
                f"datasets: grant {grant!r} is not a dataset name or a prefix ending in '*'"
            )
        grants.append(str(grant))
    if len(",".join(grants)) > 2000:
        raise InvalidInputError("datasets: at most 2000 characters of grants")
    return tuple(dict.fromkeys(grants))


def may_push(key: KeyInfo, dataset: str) -> bool:
    """Whether ``key`` may push records to ``dataset``.

    Developers and admins push anywhere; client keys only to the datasets they were granted.
    """
    if key.role in ("admin", "developer"):
        return True
    if key.role != "client":
        return False
    return any(
        dataset.startswith(g[:-1]) if g.endswith("*") else dataset == g for g in key.datasets
    )


def parse_quota(quota: str | int | None) -> int | None:
    """A token quota per UTC day: ``100000``, ``100000/day``; ``none``: no quota.

    Raises:
        InvalidInputError: not a positive whole number of tokens per day.
    """
    if quota is None:
        return None
    if isinstance(quota, bool):
        raise InvalidInputError(f"token quota {quota!r}: expected N/day or 'none'")
    if isinstance(quota, int):
        value = quota
    else:
        text = str(quota).strip().lower()
        if text in _NONE:
            return None
        amount, sep, unit = text.partition("/")
        if (sep and unit.strip() not in ("day", "d")) or not amount.strip().isdecimal():
            raise InvalidInputError(f"token quota {quota!r}: expected N/day or 'none'")
        # More digits than the largest quota has: too large (and int() of 4,300+ digits raises).
        digits = amount.strip().lstrip("0") or "0"
        value = int(digits) if len(digits) <= len(str(MAX_TOKEN_QUOTA)) else MAX_TOKEN_QUOTA + 1
    if value <= 0:
        raise InvalidInputError(f"token quota {quota!r}: must be > 0 (or 'none')")
    if value > MAX_TOKEN_QUOTA:
        raise InvalidInputError(
            f"token quota {str(quota)[:40]!r}: at most {MAX_TOKEN_QUOTA} tokens a day; "
            "use 'none' for no quota"
        )
    return value


def _grants(row: ApiKeyRow) -> list[str]:
    return [g for g in (row.datasets or "").split(",") if g]


def _record(row: ApiKeyRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "prefix": row.prefix,
        "role": row.role,
        "rate_per_min": row.rate_per_min,
        "token_quota_day": row.token_quota_day,
        "datasets": _grants(row),
        "active": row.revoked_at is None,
        "created_by": row.created_by,
        "created_at": row.created_at,
        "revoked_at": row.revoked_at,
        "last_used_at": row.last_used_at,
        "team": row.team,
        "project": row.project,
    }


def create_key(
    role: str,
    *,
    name: str = "",
    rate: str | float | None = "600/min",
    token_quota: str | int | None = None,
    team: str | None = None,
    project: str | None = None,
    datasets: str | Sequence[str] | None = None,
) -> tuple[dict[str, Any], str]:
    """Create an API key.

    Args:
        role: ``admin`` | ``developer`` | ``viewer`` | ``client``.
        name: a label for people (need not be unique).
        rate: requests per key, e.g. ``600/min`` (see :func:`parse_rate`); None: unlimited.
        token_quota: model tokens per UTC day (see :func:`parse_quota`); None: unlimited.
        team: the team its traffic is charged to (cost ledger, budgets).
        project: the project its traffic is charged to.
        datasets: client keys only: the datasets it may push records to (see
            :func:`parse_datasets`); none by default.

    Returns:
        The key's record and its secret. The secret is not stored and cannot be shown again.

    Raises:
        InvalidInputError: an unknown role, a bad name, rate or quota.
    """
    if role not in ROLES:
        raise InvalidInputError(f"role {role!r}: use one of {', '.join(ROLES)}")
    if not is_full_match(LABEL, name):
        raise InvalidInputError(
            f"name {name!r}: up to 100 letters, digits, spaces, '.', '_' or '-'"
        )
    rate_per_min, quota = parse_rate(rate), parse_quota(token_quota)
    for field, value in (("team", team), ("project", project)):
        if value is not None and not is_full_match(TEAM, value):
            raise InvalidInputError(
                f"{field} {value!r}: 1-100 letters, digits, '.', '_' or '-' (no spaces)"
            )
    grants = parse_datasets(datasets)
    if grants and role != "client":
        raise InvalidInputError(
            f"datasets: only client keys take dataset grants ({role} keys push to any dataset)"
        )
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    with session_scope() as s:
        row = ApiKeyRow(
            id=new_id("key"),
            name=name.strip(),
            prefix=secret[:PREFIX_CHARS],
            hash=hash_secret(secret),
            role=role,
            rate_per_min=rate_per_min,
            token_quota_day=quota,
            datasets=",".join(grants) or None,
            created_by=current_actor(),
            created_at=time.time(),
            team=team,
            project=project,
        )
        s.add(row)
        s.flush()
        params = {
            "name": row.name,
            "role": role,
            "rate_per_min": rate_per_min,
            "quota": quota,
            "datasets": list(grants),
            "team": team,
            "project": project,
        }
        record_event(s, "key.create", f"key:{row.id}", params)
        return _record(row), secret


def list_keys(*, include_revoked: bool = True) -> list[dict[str, Any]]:
    """Every key, oldest first, without hashes or secrets."""
    q = select(ApiKeyRow).order_by(ApiKeyRow.created_at, ApiKeyRow.id)
    if not include_revoked:
        q = q.where(ApiKeyRow.revoked_at.is_(None))
    with session_scope(readonly=True) as s:
        return [_record(r) for r in s.scalars(q)]


def get_key(key_id: str) -> dict[str, Any]:
    """One key's record. Raises NotFoundError for an unknown id."""
    with session_scope(readonly=True) as s:
        row = s.get(ApiKeyRow, complete_id(s, ApiKeyRow.id, key_id, "API key"))
        if row is None:
            raise NotFoundError(f"no API key {key_id!r} (see 'aifab keys list')")
        return _record(row)


def revoke_key(key_id: str) -> dict[str, Any]:
    """Revoke a key: it stops working (servers notice within a second). Revoking twice is a no-op.

    Its dashboard sessions end at once, in the same transaction.

    Raises:
        NotFoundError: no key has this id.
    """
    with session_scope() as s:
        row = s.get(ApiKeyRow, complete_id(s, ApiKeyRow.id, key_id, "API key"))
        if row is None:
            raise NotFoundError(f"no API key {key_id!r} (see 'aifab keys list')")
        key_id = row.id  # what the caller typed may be a prefix
        if row.revoked_at is None:
            row.revoked_at = time.time()
            record_event(s, "key.revoke", f"key:{key_id}", {"name": row.name, "role": row.role})
        s.execute(delete(UiSessionRow).where(UiSessionRow.key_id == key_id))
        return _record(row)


def authenticate(secret: str) -> KeyInfo | None:
    """The active key whose secret this is, or None (unknown, malformed or revoked)."""
    if not secret or not secret.startswith(SECRET_PREFIX) or len(secret) > 200:
        return None
    with session_scope(readonly=True) as s:
        row = s.scalar(select(ApiKeyRow).where(ApiKeyRow.hash == hash_secret(secret)))
        return _active_info(row)


def key_info(key_id: str) -> KeyInfo | None:
    """The active key with this id (as :func:`authenticate` finds it), or None."""
    with session_scope(readonly=True) as s:
        return _active_info(s.get(ApiKeyRow, key_id))


def _active_info(row: ApiKeyRow | None) -> KeyInfo | None:
    if row is None or row.revoked_at is not None:
        return None
    return KeyInfo(
        row.id, row.name, row.role, row.rate_per_min, row.token_quota_day, tuple(_grants(row))
    )
