"""Server-side dashboard sessions (revocable: sign-out, key revocation, sign out everywhere).

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ui_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_ui_sessions_key_id", "ui_sessions", ["key_id"])


def downgrade() -> None:
    op.drop_index("ix_ui_sessions_key_id", table_name="ui_sessions")
    op.drop_table("ui_sessions")
