"""Rate buckets shared by every gateway on one metadata DB (rate limits, failed sign-ins).

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rate_buckets",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("tat", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key"),
    )
    op.create_index("ix_rate_buckets_tat", "rate_buckets", ["tat"])


def downgrade() -> None:
    op.drop_index("ix_rate_buckets_tat", table_name="rate_buckets")
    op.drop_table("rate_buckets")
