"""Metadata tables of the prompt registry: immutable prompt versions and their aliases."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import JSON, Float, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from aifab.core.db import Base


class PromptVersionRow(Base):
    """One immutable version of a prompt template."""

    __tablename__ = "prompt_versions"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    template: Mapped[str] = mapped_column(Text, nullable=False)
    #: Declared variable names; rendering needs exactly these.
    variables: Mapped[list[str]] = mapped_column(JSON, nullable=False, default=list)
    description: Mapped[str] = mapped_column(Text, nullable=False, default="")
    #: sha256 of template and variables: creating the same content twice is one version.
    digest: Mapped[str] = mapped_column(String(64), nullable=False)
    created_by: Mapped[str] = mapped_column(String(200), nullable=False, default="")
    created_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)


class PromptAliasRow(Base):
    """``NAME@ALIAS`` -> a version (moved, never the version's content)."""

    __tablename__ = "prompt_aliases"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    alias: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    updated_at: Mapped[float] = mapped_column(Float, nullable=False, default=time.time)


def as_dict(row: PromptVersionRow, aliases: list[str]) -> dict[str, Any]:
    """A prompt version as a plain dict."""
    return {
        "name": row.name,
        "version": row.version,
        "ref": f"{row.name}@{row.version}",
        "template": row.template,
        "variables": list(row.variables),
        "description": row.description,
        "digest": row.digest,
        "aliases": sorted(aliases),
        "created_by": row.created_by,
        "created_at": row.created_at,
    }
