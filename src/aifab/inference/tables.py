"""Metadata tables of serving: deployments and the sampled request log."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import JSON, Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from aifab.core.db import Base


class DeploymentRow(Base):
    """A registered model (and optionally a canary version) served under one name."""

    __tablename__ = "deployments"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    #: ``NAME@ALIAS`` or ``NAME@VERSION`` as given; an alias is re-resolved, so it follows
    #: promotions and rollbacks.
    model_ref: Mapped[str] = mapped_column(String(200), nullable=False)
    canary_ref: Mapped[str | None] = mapped_column(String(200))
    #: Percent of requests (0-100) routed to the canary.
    canary_weight: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    #: Requests carrying this header route by its value's hash (same value, same version).
    sticky_header: Mapped[str | None] = mapped_column(String(100))
    replicas: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    max_batch_size: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    max_wait_ms: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    #: ``torch`` | ``onnx``
    backend: Mapped[str] = mapped_column(String(20), nullable=False, default="torch")
    #: Handler options (e.g. max_tokens cap for language models).
    options: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    #: Bumped on every change so running servers know to reload.
    generation: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    #: Reported by the server: ``pending`` | ``ready`` | ``failed``.
    status: Mapped[str] = mapped_column(String(20), nullable=False, default="pending")
    status_reason: Mapped[str | None] = mapped_column(Text)
    #: What the server actually loaded: ``{"primary": "m@3", "canary": "m@4"}``.
    serving: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    created_by: Mapped[str] = mapped_column(String(100), nullable=False, default="")
    created_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)
    updated_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)


class RequestLogRow(Base):
    """One sampled request: what came in, what went out, how long it took, for whom."""

    __tablename__ = "request_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    ts: Mapped[float] = mapped_column(Float, nullable=False, index=True)
    deployment: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    #: ``NAME@VERSION`` that answered (primary or canary).
    model_version: Mapped[str | None] = mapped_column(String(200))
    key_id: Mapped[str | None] = mapped_column(String(64), index=True)
    route: Mapped[str] = mapped_column(String(100), nullable=False)
    status: Mapped[int] = mapped_column(Integer, nullable=False)
    latency_ms: Mapped[float] = mapped_column(Float, nullable=False)
    #: Input features of a prediction, or ``{"prompt_tokens": n}`` for language models.
    input: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    #: The prediction (class, probabilities) or ``{"completion_tokens": n}``.
    output: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    tokens: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    #: The id the predict response returned (``x-request-id``): feedback labels join on it.
    request_id: Mapped[str | None] = mapped_column(String(64), index=True)
