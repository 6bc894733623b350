"""Initial schema: audit log, datasets and versions, lineage, quarantine, labels, features,
pipeline runs.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("action", sa.String(length=100), nullable=False),
        sa.Column("object", sa.String(length=500), nullable=False),
        sa.Column("params_digest", sa.String(length=64), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("prev_hash"),
    )
    op.create_index(op.f("ix_audit_events_action"), "audit_events", ["action"], unique=False)
    op.create_index(op.f("ix_audit_events_object"), "audit_events", ["object"], unique=False)
    op.create_table(
        "audit_head",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "human_labels",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dataset", sa.String(length=200), nullable=False),
        sa.Column("item_key", sa.String(length=500), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=False),
        sa.Column("labeler", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("dataset", "item_key", "labeler", name="uq_human_label"),
    )
    op.create_index(op.f("ix_human_labels_dataset"), "human_labels", ["dataset"], unique=False)
    op.create_table(
        "pipeline_runs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("pipeline", sa.String(length=200), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_pipeline_runs_pipeline"), "pipeline_runs", ["pipeline"], unique=False)
    op.create_table(
        "dataset_versions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("objects", sa.JSON(), nullable=False),
        sa.Column("schema", sa.JSON(), nullable=False),
        sa.Column("num_rows", sa.Integer(), nullable=False),
        sa.Column("num_bytes", sa.Integer(), nullable=False),
        sa.Column("profile", sa.JSON(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("transform", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("dataset_id", "content_hash", name="uq_version_content"),
        sa.UniqueConstraint("dataset_id", "version", name="uq_version_number"),
    )
    op.create_index(
        op.f("ix_dataset_versions_dataset_id"), "dataset_versions", ["dataset_id"], unique=False
    )
    op.create_table(
        "pipeline_steps",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=False),
        sa.Column("pipeline", sa.String(length=200), nullable=False),
        sa.Column("step", sa.String(length=200), nullable=False),
        sa.Column("uses", sa.String(length=100), nullable=False),
        sa.Column("cache_key", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("skipped", sa.Boolean(), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("outputs", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["pipeline_runs.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        op.f("ix_pipeline_steps_cache_key"), "pipeline_steps", ["cache_key"], unique=False
    )
    op.create_index(op.f("ix_pipeline_steps_run_id"), "pipeline_steps", ["run_id"], unique=False)
    op.create_table(
        "dataset_lineage",
        sa.Column("child_id", sa.Integer(), nullable=False),
        sa.Column("parent_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["child_id"],
            ["dataset_versions.id"],
        ),
        sa.ForeignKeyConstraint(
            ["parent_id"],
            ["dataset_versions.id"],
        ),
        sa.PrimaryKeyConstraint("child_id", "parent_id"),
    )
    op.create_table(
        "feature_sets",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("fitted_on", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["fitted_on"],
            ["dataset_versions.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("digest"),
    )
    op.create_index(op.f("ix_feature_sets_name"), "feature_sets", ["name"], unique=False)
    op.create_table(
        "quarantine",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("dataset", sa.String(length=200), nullable=False),
        sa.Column("version_id", sa.Integer(), nullable=True),
        sa.Column("stage", sa.String(length=20), nullable=False),
        sa.Column("rule", sa.String(length=200), nullable=False),
        sa.Column("line", sa.Integer(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("record", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["dataset_versions.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_quarantine_dataset"), "quarantine", ["dataset"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_quarantine_dataset"), table_name="quarantine")
    op.drop_table("quarantine")
    op.drop_index(op.f("ix_feature_sets_name"), table_name="feature_sets")
    op.drop_table("feature_sets")
    op.drop_table("dataset_lineage")
    op.drop_index(op.f("ix_pipeline_steps_run_id"), table_name="pipeline_steps")
    op.drop_index(op.f("ix_pipeline_steps_cache_key"), table_name="pipeline_steps")
    op.drop_table("pipeline_steps")
    op.drop_index(op.f("ix_dataset_versions_dataset_id"), table_name="dataset_versions")
    op.drop_table("dataset_versions")
    op.drop_index(op.f("ix_pipeline_runs_pipeline"), table_name="pipeline_runs")
    op.drop_table("pipeline_runs")
    op.drop_index(op.f("ix_human_labels_dataset"), table_name="human_labels")
    op.drop_table("human_labels")
    op.drop_table("datasets")
    op.drop_table("audit_head")
    op.drop_index(op.f("ix_audit_events_object"), table_name="audit_events")
    op.drop_index(op.f("ix_audit_events_action"), table_name="audit_events")
    op.drop_table("audit_events")
