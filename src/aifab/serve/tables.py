"""Gateway tables: API keys, token use, sessions, idempotent requests, shared rate buckets."""

from __future__ import annotations

import time

from sqlalchemy import Float, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from aifab.core.db import Base


class ApiKeyRow(Base):
    """An API key: only its SHA-256 is stored; the secret is shown once at creation."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), nullable=False, default="")
    #: The first characters of the secret, so a user can tell keys apart in listings.
    prefix: Mapped[str] = mapped_column(String(16), nullable=False)
    hash: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    #: ``admin`` | ``developer`` | ``viewer`` | ``client``
    role: Mapped[str] = mapped_column(String(20), nullable=False)
    #: Requests per minute (token bucket), or ``None``: unlimited.
    rate_per_min: Mapped[float | None] = mapped_column(Float)
    #: Model tokens per UTC day, or ``None``: unlimited.
    token_quota_day: Mapped[int | None] = mapped_column(Integer)
    #: Client keys: comma-separated datasets (``name``, or a prefix ending in ``*``) they may
    #: push records to; ``None``/empty: none. Developers and admins push anywhere.
    datasets: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String(100), nullable=False, default="")
    created_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)
    revoked_at: Mapped[float | None] = mapped_column(Float)
    last_used_at: Mapped[float | None] = mapped_column(Float)
    #: Who pays for its traffic (the cost ledger and budgets group by these).
    team: Mapped[str | None] = mapped_column(String(100))
    project: Mapped[str | None] = mapped_column(String(100))


class KeyUsageRow(Base):
    """Tokens and requests of one key on one UTC day (what token quotas count)."""

    __tablename__ = "key_usage"

    key_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    day: Mapped[str] = mapped_column(String(10), primary_key=True)
    tokens: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    requests: Mapped[int] = mapped_column(Integer, nullable=False, default=0)


class UiSessionRow(Base):
    """A signed-in dashboard session; the cookie is valid only while its row exists."""

    __tablename__ = "ui_sessions"

    #: SHA-256 of the session id the signed cookie carries (a DB reader cannot replay it).
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_id: Mapped[str] = mapped_column(String(32), nullable=False, index=True)
    created_at: Mapped[float] = mapped_column(Float, nullable=False)
    expires_at: Mapped[float] = mapped_column(Float, nullable=False)


class IdempotentRequestRow(Base):
    """A request sent with an ``Idempotency-Key``: its fingerprint and, once done, its answer."""

    __tablename__ = "idempotent_requests"

    key_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    #: The client's ``Idempotency-Key`` header (unique per API key).
    idempotency_key: Mapped[str] = mapped_column(String(255), primary_key=True)
    #: SHA-256 of the route and body: a reused key with another request is refused.
    fingerprint: Mapped[str] = mapped_column(String(64), nullable=False)
    #: The answer's status and JSON body; ``None`` while the first request is running.
    status: Mapped[int | None] = mapped_column(Integer)
    body: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float, nullable=False, index=True)


class RateBucketRow(Base):
    """One token bucket shared by every gateway on this DB (:mod:`aifab.serve.buckets`).

    ``tat`` is the bucket's "theoretical arrival time" (GCRA): the epoch second at which it is
    full again; a bucket whose ``tat`` has passed is full, and such rows are pruned.
    """

    __tablename__ = "rate_buckets"
    __table_args__ = (Index("ix_rate_buckets_tat", "tat"),)

    #: ``rate:<key id>`` or ``auth:<client address>``.
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    tat: Mapped[float] = mapped_column(Float, nullable=False)
