"""Job list indexes: jobs newest first and the latest attempts, for the jobs pages and CLI.

Revision ID: 0016
Revises: 0015
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_submitted_at_id", "jobs", ["submitted_at", "id"])
    op.create_index("ix_job_attempts_started_at_id", "job_attempts", ["started_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_job_attempts_started_at_id", table_name="job_attempts")
    op.drop_index("ix_jobs_submitted_at_id", table_name="jobs")
