"""Metadata tables of the cost ledger: priced usage entries, roll-up cursors and team budgets."""

from __future__ import annotations

import time

from sqlalchemy import Float, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from aifab.core.db import Base


class CostEntryRow(Base):
    """Priced usage of one job attempt or one roll-up of gateway traffic."""

    __tablename__ = "cost_entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: What the entry was made from (``attempt:<id>``, ``gateway:<first>-<last>:...``): a roll-up
    #: run twice cannot enter the same usage twice.
    source_key: Mapped[str] = mapped_column(String(200), nullable=False, unique=True)
    #: ``job`` | ``gateway``
    source: Mapped[str] = mapped_column(String(20), nullable=False)
    ts: Mapped[float] = mapped_column(Float, nullable=False, index=True)
    day: Mapped[str] = mapped_column(String(10), nullable=False)
    team: Mapped[str] = mapped_column(String(100), nullable=False, index=True)
    project: Mapped[str] = mapped_column(String(100), nullable=False)
    model: Mapped[str] = mapped_column(String(200), nullable=False)
    deployment: Mapped[str] = mapped_column(String(100), nullable=False)
    #: The job id or the API key id the usage came from.
    ref: Mapped[str] = mapped_column(String(200), nullable=False)
    cpu_hours: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    gpu_hours: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    memory_gb_hours: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)
    requests: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    tokens: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    cost: Mapped[float] = mapped_column(Float, nullable=False, default=0.0)


class CostCursorRow(Base):
    """How far a roll-up has read its source (the last request-log id, the last attempt id)."""

    __tablename__ = "cost_cursors"

    name: Mapped[str] = mapped_column(String(50), primary_key=True)
    value: Mapped[int] = mapped_column(Integer, nullable=False, default=0)


class BudgetRow(Base):
    """A team's spending limit per period, and the share at which it warns."""

    __tablename__ = "budgets"

    team: Mapped[str] = mapped_column(String(100), primary_key=True)
    amount: Mapped[float] = mapped_column(Float, nullable=False)
    #: ``day`` | ``week`` | ``month``
    period: Mapped[str] = mapped_column(String(10), nullable=False)
    alert_at: Mapped[float] = mapped_column(Float, nullable=False, default=0.8)
    created_by: Mapped[str] = mapped_column(String(200), nullable=False, default="")
    updated_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)
