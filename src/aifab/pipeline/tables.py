"""Metadata tables of the pipeline runner: runs and their steps."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from aifab.core.db import Base


class PipelineRunRow(Base):
    """One execution of a pipeline file."""

    __tablename__ = "pipeline_runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    pipeline: Mapped[str] = mapped_column(String(200), nullable=False, index=True)
    path: Mapped[str] = mapped_column(Text, nullable=False)
    status: Mapped[str] = mapped_column(String(20), nullable=False)
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)
    finished_at: Mapped[float | None] = mapped_column(Float)


class StepRunRow(Base):
    """One step of a pipeline run, with the cache key that lets unchanged steps be skipped."""

    __tablename__ = "pipeline_steps"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("pipeline_runs.id"), nullable=False, index=True)
    pipeline: Mapped[str] = mapped_column(String(200), nullable=False)
    step: Mapped[str] = mapped_column(String(200), nullable=False)
    uses: Mapped[str] = mapped_column(String(100), nullable=False)
    cache_key: Mapped[str] = mapped_column(String(64), nullable=False, index=True)
    status: Mapped[str] = mapped_column(String(20), nullable=False)
    skipped: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    inputs: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    outputs: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)
    finished_at: Mapped[float | None] = mapped_column(Float)
