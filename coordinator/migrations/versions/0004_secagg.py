"""Secure aggregation: identity keys, round attempts, round messages.

Revision ID: 0004_secagg
Revises: 0003_ingest
"""

import sqlalchemy as sa
from alembic import op

revision = "0004_secagg"
down_revision = "0003_ingest"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "identity_keys",
        sa.Column("participant_id", sa.Integer(), sa.ForeignKey("participants.id"), nullable=False),
        sa.Column("public_key", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("participant_id"),
        sa.UniqueConstraint("public_key"),
    )
    op.create_table(
        "secagg_rounds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.String(length=64), sa.ForeignKey("studies.id"), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("expected", sa.Text(), nullable=False),
        sa.Column("roster", sa.Text(), nullable=True),
        sa.Column("request", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("study_id", "number", "attempt"),
    )
    op.create_index("ix_secagg_rounds_study_id", "secagg_rounds", ["study_id"])
    op.create_table(
        "secagg_messages",
        sa.Column("round_id", sa.Integer(), sa.ForeignKey("secagg_rounds.id"), nullable=False),
        sa.Column("participant_id", sa.Integer(), sa.ForeignKey("participants.id"), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("round_id", "participant_id", "kind"),
    )


def downgrade() -> None:
    op.drop_table("secagg_messages")
    op.drop_index("ix_secagg_rounds_study_id", table_name="secagg_rounds")
    op.drop_table("secagg_rounds")
    op.drop_table("identity_keys")
