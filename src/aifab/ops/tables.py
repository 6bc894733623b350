"""Metadata tables of operations (monitoring, alerts, schedules and the retrain loop).

Monitors and their results, feedback labels, alerts, silences, schedules and their runs,
retrain policies and their runs.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import JSON, Boolean, Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from aifab.core.db import Base


class MonitorRow(Base):
    """A monitor: what to watch on one deployment (drift, quality, objectives) and how."""

    __tablename__ = "ops_monitors"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    deployment: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    #: The validated :class:`aifab.ops.monitor_spec.MonitorSpec` as JSON.
    spec: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    created_by: Mapped[str] = mapped_column(String(200), nullable=False, default="")
    created_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)


class MonitorResultRow(Base):
    """One run of a monitor over one window of the request log."""

    __tablename__ = "ops_monitor_results"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    monitor: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    ts: Mapped[float] = mapped_column(Float, nullable=False, index=True)
    window_start: Mapped[float] = mapped_column(Float, nullable=False)
    window_end: Mapped[float] = mapped_column(Float, nullable=False)
    #: ``ok`` | ``breach`` | ``no_data`` | ``error``
    status: Mapped[str] = mapped_column(String(20), nullable=False)
    #: Flat numbers (``drift_share``, ``accuracy``, ``latency_p99_ms``...) for metrics and rules.
    values: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
    #: The full report (per-column drift, notes on missing data).
    report: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)


class FeedbackRow(Base):
    """A label that arrived for a served request (joined to the request log by request id)."""

    __tablename__ = "ops_feedback"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    #: Which row of a batch request the label belongs to.
    item: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    label: Mapped[str] = mapped_column(String(200), nullable=False)
    ts: Mapped[float] = mapped_column(Float, nullable=False)
    actor: Mapped[str] = mapped_column(String(200), nullable=False, default="")


class AlertRow(Base):
    """One alert (a rule breached for a subject), firing until resolved; repeats fold into it."""

    __tablename__ = "ops_alerts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: rule + subject: the de-duplication key of a firing alert.
    fingerprint: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    rule: Mapped[str] = mapped_column(String(100), nullable=False)
    monitor: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    #: Grouping key (the deployment): one notification per group per evaluation.
    group: Mapped[str] = mapped_column(String(100), nullable=False, default="")
    severity: Mapped[str] = mapped_column(String(20), nullable=False, default="warning")
    #: ``firing`` | ``resolved``
    state: Mapped[str] = mapped_column(String(20), nullable=False, index=True)
    message: Mapped[str] = mapped_column(Text, nullable=False, default="")
    value: Mapped[float | None] = mapped_column(Float)
    count: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    silenced: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    first_at: Mapped[float] = mapped_column(Float, nullable=False)
    last_at: Mapped[float] = mapped_column(Float, nullable=False)
    resolved_at: Mapped[float | None] = mapped_column(Float)


class AlertEventRow(Base):
    """Alert history: fired, repeated, silenced, resolved, delivered, delivery failed."""

    __tablename__ = "ops_alert_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    alert_id: Mapped[int] = mapped_column(Integer, nullable=False, index=True)
    ts: Mapped[float] = mapped_column(Float, nullable=False)
    kind: Mapped[str] = mapped_column(String(30), nullable=False)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)


class SilenceRow(Base):
    """Mute alerts matching a rule and/or monitor until a time."""

    __tablename__ = "ops_silences"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rule: Mapped[str | None] = mapped_column(String(100))
    monitor: Mapped[str | None] = mapped_column(String(100))
    until: Mapped[float] = mapped_column(Float, nullable=False)
    reason: Mapped[str] = mapped_column(Text, nullable=False, default="")
    created_by: Mapped[str] = mapped_column(String(200), nullable=False, default="")
    created_at: Mapped[float] = mapped_column(Float, nullable=False)


class ScheduleRow(Base):
    """Recurring work: a pipeline, a monitor or a job on a cron expression."""

    __tablename__ = "ops_schedules"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    cron: Mapped[str] = mapped_column(String(100), nullable=False)
    #: ``pipeline`` | ``monitor`` | ``job``
    target_kind: Mapped[str] = mapped_column(String(20), nullable=False)
    target: Mapped[str] = mapped_column(Text, nullable=False)
    paused: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    #: When the next run is due (a due time in the past after downtime runs once).
    next_at: Mapped[float] = mapped_column(Float, nullable=False)
    #: A worker holding the lease runs the schedule; nobody else may until it expires.
    lease_owner: Mapped[str | None] = mapped_column(String(100))
    lease_until: Mapped[float | None] = mapped_column(Float)
    created_by: Mapped[str] = mapped_column(String(200), nullable=False, default="")
    created_at: Mapped[float] = mapped_column(Float, nullable=False)


class ScheduleRunRow(Base):
    """One run of a schedule."""

    __tablename__ = "ops_schedule_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    schedule: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    due_at: Mapped[float] = mapped_column(Float, nullable=False)
    started_at: Mapped[float] = mapped_column(Float, nullable=False)
    finished_at: Mapped[float | None] = mapped_column(Float)
    #: ``running`` | ``succeeded`` | ``failed``
    status: Mapped[str] = mapped_column(String(20), nullable=False)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)


class PolicyRow(Base):
    """A retrain-and-promote policy (its YAML as validated JSON)."""

    __tablename__ = "ops_policies"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    created_by: Mapped[str] = mapped_column(String(200), nullable=False, default="")
    created_at: Mapped[float] = mapped_column(Float, nullable=False)


class PolicyRunRow(Base):
    """One pass of the closed loop: trigger, retrain, gate, canary, promote or roll back."""

    __tablename__ = "ops_policy_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    policy: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    started_at: Mapped[float] = mapped_column(Float, nullable=False)
    finished_at: Mapped[float | None] = mapped_column(Float)
    #: ``running`` | ``promoted`` | ``rolled_back`` | ``gate_failed`` | ``failed`` | ``skipped``
    outcome: Mapped[str] = mapped_column(String(20), nullable=False)
    #: The one record that explains why: trigger, job, candidate, gate checks, canary, decision.
    record: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False, default=dict)
