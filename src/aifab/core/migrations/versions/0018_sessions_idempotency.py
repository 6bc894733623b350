"""Server-side dashboard sessions (revocable: sign-out, key revocation, sign out everywhere) and
the answers of record pushes sent with an ``Idempotency-Key``.

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
    op.create_table(
        "idempotent_requests",
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("body", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key_id", "idempotency_key"),
    )
    op.create_index("ix_idempotent_requests_created_at", "idempotent_requests", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_idempotent_requests_created_at", table_name="idempotent_requests")
    op.drop_table("idempotent_requests")
    op.drop_index("ix_ui_sessions_key_id", table_name="ui_sessions")
    op.drop_table("ui_sessions")
