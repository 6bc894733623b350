"""Operations: monitors and results, feedback, alerts and silences, schedules, policies;
the request id on the request log (feedback joins by it).

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ops_monitors",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("deployment", sa.String(length=100), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_index(
        op.f("ix_ops_monitors_deployment"), "ops_monitors", ["deployment"], unique=False
    )
    op.create_table(
        "ops_monitor_results",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("monitor", sa.String(length=100), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("window_start", sa.Float(), nullable=False),
        sa.Column("window_end", sa.Float(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        op.f("ix_ops_monitor_results_monitor"), "ops_monitor_results", ["monitor"], unique=False
    )
    op.create_index(op.f("ix_ops_monitor_results_ts"), "ops_monitor_results", ["ts"], unique=False)
    op.create_table(
        "ops_feedback",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=False),
        sa.Column("item", sa.Integer(), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        op.f("ix_ops_feedback_request_id"), "ops_feedback", ["request_id"], unique=False
    )
    op.create_table(
        "ops_alerts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("rule", sa.String(length=100), nullable=False),
        sa.Column("monitor", sa.String(length=100), nullable=False),
        sa.Column("group", sa.String(length=100), nullable=False),
        sa.Column("severity", sa.String(length=20), nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("silenced", sa.Boolean(), nullable=False),
        sa.Column("first_at", sa.Float(), nullable=False),
        sa.Column("last_at", sa.Float(), nullable=False),
        sa.Column("resolved_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_ops_alerts_fingerprint"), "ops_alerts", ["fingerprint"], unique=False)
    op.create_index(op.f("ix_ops_alerts_monitor"), "ops_alerts", ["monitor"], unique=False)
    op.create_index(op.f("ix_ops_alerts_state"), "ops_alerts", ["state"], unique=False)
    op.create_table(
        "ops_alert_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("alert_id", sa.Integer(), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("kind", sa.String(length=30), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        op.f("ix_ops_alert_events_alert_id"), "ops_alert_events", ["alert_id"], unique=False
    )
    op.create_table(
        "ops_silences",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("rule", sa.String(length=100), nullable=True),
        sa.Column("monitor", sa.String(length=100), nullable=True),
        sa.Column("until", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "ops_schedules",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("cron", sa.String(length=100), nullable=False),
        sa.Column("target_kind", sa.String(length=20), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("next_at", sa.Float(), nullable=False),
        sa.Column("lease_owner", sa.String(length=100), nullable=True),
        sa.Column("lease_until", sa.Float(), nullable=True),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "ops_schedule_runs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("schedule", sa.String(length=100), nullable=False),
        sa.Column("due_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        op.f("ix_ops_schedule_runs_schedule"), "ops_schedule_runs", ["schedule"], unique=False
    )
    op.create_table(
        "ops_policies",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "ops_policy_runs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("policy", sa.String(length=100), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.Column("outcome", sa.String(length=20), nullable=False),
        sa.Column("record", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_ops_policy_runs_policy"), "ops_policy_runs", ["policy"], unique=False)
    with op.batch_alter_table("request_log") as batch:
        batch.add_column(sa.Column("request_id", sa.String(length=64), nullable=True))
        batch.create_index("ix_request_log_request_id", ["request_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("request_log") as batch:
        batch.drop_index("ix_request_log_request_id")
        batch.drop_column("request_id")
    op.drop_table("ops_policy_runs")
    op.drop_table("ops_policies")
    op.drop_table("ops_schedule_runs")
    op.drop_table("ops_schedules")
    op.drop_table("ops_silences")
    op.drop_table("ops_alert_events")
    op.drop_table("ops_alerts")
    op.drop_table("ops_feedback")
    op.drop_table("ops_monitor_results")
    op.drop_table("ops_monitors")
