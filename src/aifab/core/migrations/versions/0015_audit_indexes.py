"""Audit log indexes: events by actor (newest first) and by time, for the dashboard's filters.

Revision ID: 0015
Revises: 0012
"""

from alembic import op

revision = "0015"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_audit_events_actor_id", "audit_events", ["actor", "id"])
    op.create_index("ix_audit_events_ts", "audit_events", ["ts"])


def downgrade() -> None:
    op.drop_index("ix_audit_events_ts", table_name="audit_events")
    op.drop_index("ix_audit_events_actor_id", table_name="audit_events")
