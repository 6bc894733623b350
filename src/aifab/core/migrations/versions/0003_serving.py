"""Serving: deployments, the sampled request log, API keys and their daily usage.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deployments",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("model_ref", sa.String(length=200), nullable=False),
        sa.Column("canary_ref", sa.String(length=200), nullable=True),
        sa.Column("canary_weight", sa.Float(), nullable=False),
        sa.Column("sticky_header", sa.String(length=100), nullable=True),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column("max_batch_size", sa.Integer(), nullable=False),
        sa.Column("max_wait_ms", sa.Float(), nullable=False),
        sa.Column("backend", sa.String(length=20), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("status_reason", sa.Text(), nullable=True),
        sa.Column("serving", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "request_log",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("deployment", sa.String(length=100), nullable=False),
        sa.Column("model_version", sa.String(length=200), nullable=True),
        sa.Column("key_id", sa.String(length=64), nullable=True),
        sa.Column("route", sa.String(length=100), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("input", sa.JSON(), nullable=True),
        sa.Column("output", sa.JSON(), nullable=True),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_request_log_ts"), "request_log", ["ts"], unique=False)
    op.create_index(op.f("ix_request_log_deployment"), "request_log", ["deployment"], unique=False)
    op.create_index(op.f("ix_request_log_key_id"), "request_log", ["key_id"], unique=False)
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=20), nullable=False),
        sa.Column("rate_per_min", sa.Float(), nullable=True),
        sa.Column("token_quota_day", sa.Integer(), nullable=True),
        sa.Column("created_by", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.Column("last_used_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("hash"),
    )
    op.create_table(
        "key_usage",
        sa.Column("key_id", sa.String(length=32), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key_id", "day"),
    )


def downgrade() -> None:
    op.drop_table("key_usage")
    op.drop_table("api_keys")
    op.drop_index(op.f("ix_request_log_key_id"), table_name="request_log")
    op.drop_index(op.f("ix_request_log_deployment"), table_name="request_log")
    op.drop_index(op.f("ix_request_log_ts"), table_name="request_log")
    op.drop_table("request_log")
    op.drop_table("deployments")
