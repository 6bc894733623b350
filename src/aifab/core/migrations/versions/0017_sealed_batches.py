"""Sealed pushed batches: batch ids on the object store committed into a version (exactly once).

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sealed_batches",
        sa.Column("dataset", sa.String(length=200), nullable=False),
        sa.Column("batch_id", sa.String(length=100), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=False),
        sa.Column("sealed_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["version_id"], ["dataset_versions.id"]),
        sa.PrimaryKeyConstraint("dataset", "batch_id"),
    )


def downgrade() -> None:
    op.drop_table("sealed_batches")
