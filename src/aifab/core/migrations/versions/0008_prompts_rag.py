"""Prompts and RAG: prompt versions and aliases, knowledge bases and their versions.

Revision ID: 0008
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "prompt_versions",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("template", sa.Text(), nullable=False),
        sa.Column("variables", sa.JSON(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", "version"),
    )
    op.create_table(
        "prompt_aliases",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("alias", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", "alias"),
    )
    op.create_table(
        "knowledge_bases",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("embedder", sa.String(length=300), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("current_version", sa.Integer(), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "kb_versions",
        sa.Column("kb", sa.String(length=100), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("parent", sa.Integer(), nullable=True),
        sa.Column("sources", sa.JSON(), nullable=False),
        sa.Column("embedder", sa.String(length=300), nullable=False),
        sa.Column("counts", sa.JSON(), nullable=False),
        sa.Column("quarantine", sa.JSON(), nullable=False),
        sa.Column("index_dir", sa.String(length=500), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("kb", "version"),
    )


def downgrade() -> None:
    op.drop_table("kb_versions")
    op.drop_table("knowledge_bases")
    op.drop_table("prompt_aliases")
    op.drop_table("prompt_versions")
