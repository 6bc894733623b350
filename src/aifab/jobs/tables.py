"""Metadata tables of the scheduler: queues, jobs, attempts, events and workers."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from aifab.core.db import Base


class QueueRow(Base):
    """A queue in the spirit of Volcano's: weight, capability and whether it can be reclaimed."""

    __tablename__ = "queues"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    weight: Mapped[float] = mapped_column(Float, nullable=False, default=1.0)
    #: Max resources its running jobs may hold (``Resources.to_dict``), or ``None``: unlimited.
    capability: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    reclaimable: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    created_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)


class JobRow(Base):
    """A job and its current state; each run of it is an attempt."""

    __tablename__ = "jobs"
    # The jobs list (CLI, dashboard) pages newest first.
    __table_args__ = (Index("ix_jobs_submitted_at_id", "submitted_at", "id"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    queue: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    priority: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    #: pending | running | succeeded | failed | cancelled
    state: Mapped[str] = mapped_column(String(20), nullable=False, index=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    executor: Mapped[str] = mapped_column(String(20), nullable=False)
    attempt: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    #: Why it waits, why it failed, or who preempted it.
    reason: Mapped[str | None] = mapped_column(Text)
    #: ``"cancel"`` or ``"preempt"`` when the job's worker should stop it, else ``None``.
    stop_request: Mapped[str | None] = mapped_column(String(20))
    worker_id: Mapped[str | None] = mapped_column(String(64))
    lease_until: Mapped[float | None] = mapped_column(Float)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    #: Wall, CPU, memory and GPU use summed over attempts.
    usage: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    submitted_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    #: Who pays for it (the cost ledger and budgets group by these).
    team: Mapped[str | None] = mapped_column(String(100))
    project: Mapped[str | None] = mapped_column(String(100))


class AttemptRow(Base):
    """One run of a job: where it ran, its process handle, exit codes and resource use."""

    __tablename__ = "job_attempts"
    __table_args__ = (
        UniqueConstraint("job_id", "number", name="uq_attempt_number"),
        # The dashboard's timeline reads the latest attempts.
        Index("ix_job_attempts_started_at_id", "started_at", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), nullable=False, index=True)
    number: Mapped[int] = mapped_column(Integer, nullable=False)
    worker_id: Mapped[str] = mapped_column(String(64), nullable=False)
    #: running | succeeded | failed | cancelled | preempted | lost | timeout
    state: Mapped[str] = mapped_column(String(20), nullable=False)
    placement: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    #: Executor-specific handle (pids and process groups, Ray ids, Kubernetes names).
    handle: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    exit_codes: Mapped[list[int | None]] = mapped_column(JSON, nullable=False, default=list)
    usage: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    reason: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)
    finished_at: Mapped[float | None] = mapped_column(Float)


class JobEventRow(Base):
    """Something that happened to a job (submitted, started, preempted, requeued, finished)."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), nullable=False, index=True)
    ts: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)
    kind: Mapped[str] = mapped_column(String(30), nullable=False)
    message: Mapped[str] = mapped_column(Text, nullable=False, default="")


class WorkerRow(Base):
    """A scheduler/worker process and its heartbeat."""

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    host: Mapped[str] = mapped_column(String(200), nullable=False)
    pid: Mapped[int] = mapped_column(Integer, nullable=False)
    executor: Mapped[str] = mapped_column(String(20), nullable=False)
    capacity: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    state: Mapped[str] = mapped_column(String(20), nullable=False, default="alive")
    started_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)
    heartbeat_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)
