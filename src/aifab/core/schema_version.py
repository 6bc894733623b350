"""The metadata DB's schema revision, without SQLAlchemy (the CLI's fast read path checks it)."""

from __future__ import annotations

#: The Alembic revision this code expects; a test checks it equals the migrations' head.
SCHEMA_REVISION = "0019"
#: aifab's own Alembic version table (Optuna, sharing the DB, uses ``alembic_version``).
VERSION_TABLE = "aifab_schema_version"
