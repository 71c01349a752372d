"""Refused attempts: releases refused for passing a participant's cap (dashboard).

Revision ID: 0005_refusals
Revises: 0004_secagg
"""

import sqlalchemy as sa
from alembic import op

revision = "0005_refusals"
down_revision = "0004_secagg"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "refused_attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.String(length=64), nullable=False),
        sa.Column("eps_units", sa.BigInteger(), nullable=False),
        sa.Column("delta_units", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.String(length=256), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["participant_id"], ["participants.id"]),
        sa.ForeignKeyConstraint(["study_id"], ["studies.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_refused_attempts_participant_id", "refused_attempts", ["participant_id"])


def downgrade() -> None:
    op.drop_index("ix_refused_attempts_participant_id", table_name="refused_attempts")
    op.drop_table("refused_attempts")
