"""Metadata tables of agents: definitions, runs and their steps (the traces)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import JSON, Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from aifab.core.db import Base


class AgentRow(Base):
    """One agent definition (its validated YAML); ``version`` grows on every change."""

    __tablename__ = "agents"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    version: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    created_by: Mapped[str] = mapped_column(String(100), nullable=False, default="")
    created_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)
    updated_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)


class AgentRunRow(Base):
    """One run of an agent: who asked what, how it ended, what it cost."""

    __tablename__ = "agent_runs"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    agent: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    agent_version: Mapped[int] = mapped_column(Integer, nullable=False)
    actor: Mapped[str] = mapped_column(String(100), nullable=False)
    #: ``running`` | ``completed`` | ``budget_exceeded`` | ``failed``
    status: Mapped[str] = mapped_column(String(20), nullable=False)
    input: Mapped[str] = mapped_column(Text, nullable=False)
    answer: Mapped[str | None] = mapped_column(Text)
    reason: Mapped[str | None] = mapped_column(Text)
    tokens: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    steps: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    started_at: Mapped[float] = mapped_column(Float, nullable=False, index=True)
    ended_at: Mapped[float | None] = mapped_column(Float)


class AgentStepRow(Base):
    """One model call or tool call of a run, with its input, output, latency and tokens."""

    __tablename__ = "agent_steps"

    run_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    idx: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(10), nullable=False)
    name: Mapped[str] = mapped_column(String(100), nullable=False)
    input: Mapped[Any] = mapped_column(JSON, nullable=True)
    output: Mapped[Any] = mapped_column(JSON, nullable=True)
    error: Mapped[str | None] = mapped_column(Text)
    latency_ms: Mapped[float] = mapped_column(Float, nullable=False)
    tokens: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    ts: Mapped[float] = mapped_column(Float, nullable=False)
