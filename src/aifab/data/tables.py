"""Metadata tables of the data layer: datasets, versions, lineage, quarantine, labels, features."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from aifab.core.db import Base


class DatasetRow(Base):
    """A named dataset; its content lives in immutable versions."""

    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), nullable=False, unique=True)
    description: Mapped[str] = mapped_column(Text, nullable=False, default="")
    created_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)


class VersionRow(Base):
    """One immutable, content-addressed version of a dataset."""

    __tablename__ = "dataset_versions"
    __table_args__ = (
        UniqueConstraint("dataset_id", "version", name="uq_version_number"),
        UniqueConstraint("dataset_id", "content_hash", name="uq_version_content"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id"), nullable=False, index=True)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    content_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    #: Lake object keys (relative to ``lake/``), read in order as one table.
    objects: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    schema: Mapped[list[dict[str, Any]]] = mapped_column(JSON, nullable=False)
    num_rows: Mapped[int] = mapped_column(Integer, nullable=False)
    num_bytes: Mapped[int] = mapped_column(Integer, nullable=False)
    profile: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    source: Mapped[str] = mapped_column(Text, nullable=False, default="")
    #: What produced this version: ``{"kind": "clean", "spec": {...}, ...}``.
    transform: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    created_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)
    created_by: Mapped[str] = mapped_column(String(200), nullable=False, default="")


class LineageEdge(Base):
    """``child`` was derived from ``parent`` (both dataset versions)."""

    __tablename__ = "dataset_lineage"

    child_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id"), primary_key=True)
    parent_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id"), primary_key=True)


class QuarantineRow(Base):
    """A row that failed ingest parsing or validation, kept with the reason."""

    __tablename__ = "quarantine"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dataset: Mapped[str] = mapped_column(String(200), nullable=False, index=True)
    #: The version the row was checked against (validate) or ``None`` (rejected at ingest).
    version_id: Mapped[int | None] = mapped_column(ForeignKey("dataset_versions.id"))
    stage: Mapped[str] = mapped_column(String(20), nullable=False)
    rule: Mapped[str] = mapped_column(String(200), nullable=False)
    line: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text, nullable=False)
    record: Mapped[Any] = mapped_column(JSON, nullable=True)
    created_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)


class HumanLabel(Base):
    """A label given by a person through the labeling queue: who labeled what, when."""

    __tablename__ = "human_labels"
    __table_args__ = (UniqueConstraint("dataset", "item_key", "labeler", name="uq_human_label"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dataset: Mapped[str] = mapped_column(String(200), nullable=False, index=True)
    item_key: Mapped[str] = mapped_column(String(500), nullable=False)
    label: Mapped[str] = mapped_column(String(200), nullable=False)
    labeler: Mapped[str] = mapped_column(String(200), nullable=False)
    created_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)


class FeatureSetRow(Base):
    """A fitted feature transform artifact and the data version it was fitted on."""

    __tablename__ = "feature_sets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), nullable=False, index=True)
    digest: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    fitted_on: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id"), nullable=False)
    path: Mapped[str] = mapped_column(Text, nullable=False)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    created_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)


class SealedBatchRow(Base):
    """A pushed batch on the object store sealed into a version (recorded with the version).

    The primary key makes sealing exactly-once across machines: a batch whose object survives
    its seal (a crash before the delete) or that two nodes seal at once is committed only once.
    """

    __tablename__ = "sealed_batches"

    dataset: Mapped[str] = mapped_column(String(200), primary_key=True)
    batch_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("dataset_versions.id"), nullable=False)
    sealed_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)
