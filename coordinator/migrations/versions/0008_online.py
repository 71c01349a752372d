"""Streaming mode: noisy gradient releases and the online model per study.

Revision ID: 0008_online
Revises: 0005_refusals
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_online"
down_revision = "0007_cohorts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "online_releases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.String(length=64), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=128), nullable=False),
        sa.Column("request_sha256", sa.String(length=64), nullable=False),
        sa.Column("config_version", sa.Integer(), nullable=False),
        sa.Column("weights_version", sa.Integer(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("noisy_sum", sa.Text(), nullable=False),
        sa.Column("eps_units", sa.BigInteger(), nullable=False),
        sa.Column("delta_units", sa.BigInteger(), nullable=False),
        sa.Column("applied_in", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["participant_id"], ["participants.id"]),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("participant_id", "study_id", "idempotency_key"),
    )
    op.create_index("ix_online_releases_study_id", "online_releases", ["study_id"])
    op.create_index("ix_online_releases_participant_id", "online_releases", ["participant_id"])
    op.create_table(
        "online_models",
        sa.Column("study_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("pending", sa.Integer(), nullable=False),
        sa.Column("weights", sa.Text(), nullable=False),
        sa.Column("average", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"]),
        sa.PrimaryKeyConstraint("study_id"),
    )


def downgrade() -> None:
    op.drop_table("online_models")
    op.drop_index("ix_online_releases_participant_id", table_name="online_releases")
    op.drop_index("ix_online_releases_study_id", table_name="online_releases")
    op.drop_table("online_releases")
