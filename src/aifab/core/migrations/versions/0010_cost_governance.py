"""Cost and governance: team/project on keys and jobs, the cost ledger, its cursors, budgets.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("api_keys", "jobs"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("team", sa.String(length=100), nullable=True))
            batch.add_column(sa.Column("project", sa.String(length=100), nullable=True))
    op.create_table(
        "cost_entries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("source_key", sa.String(length=200), nullable=False),
        sa.Column("source", sa.String(length=20), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("team", sa.String(length=100), nullable=False),
        sa.Column("project", sa.String(length=100), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("deployment", sa.String(length=100), nullable=False),
        sa.Column("ref", sa.String(length=200), nullable=False),
        sa.Column("cpu_hours", sa.Float(), nullable=False),
        sa.Column("gpu_hours", sa.Float(), nullable=False),
        sa.Column("memory_gb_hours", sa.Float(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("cost", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("source_key"),
    )
    op.create_index(op.f("ix_cost_entries_ts"), "cost_entries", ["ts"], unique=False)
    op.create_index(op.f("ix_cost_entries_team"), "cost_entries", ["team"], unique=False)
    op.create_table(
        "cost_cursors",
        sa.Column("name", sa.String(length=50), nullable=False),
        sa.Column("value", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "budgets",
        sa.Column("team", sa.String(length=100), nullable=False),
        sa.Column("amount", sa.Float(), nullable=False),
        sa.Column("period", sa.String(length=10), nullable=False),
        sa.Column("alert_at", sa.Float(), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("team"),
    )


def downgrade() -> None:
    op.drop_table("budgets")
    op.drop_table("cost_cursors")
    op.drop_index(op.f("ix_cost_entries_team"), table_name="cost_entries")
    op.drop_index(op.f("ix_cost_entries_ts"), table_name="cost_entries")
    op.drop_table("cost_entries")
    for table in ("jobs", "api_keys"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("project")
            batch.drop_column("team")
