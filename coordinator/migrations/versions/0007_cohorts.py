"""Private cohort rounds: rounds, participants' noisy vectors, the released model.

Revision ID: 0007_cohorts
Revises: 0005_refusals
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_cohorts"
down_revision = "0006_login_throttle"
branch_labels = None
depends_on = None


def _study() -> sa.Column:  # type: ignore[type-arg]
    return sa.Column("study_id", sa.String(length=64), sa.ForeignKey("studies.id"),
                     nullable=False)


def upgrade() -> None:
    op.create_table(
        "cohort_rounds",
        _study(),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("config_version", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("expected", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("study_id", "number"),
    )
    op.create_table(
        "cohort_releases",
        _study(),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("participant_id", sa.Integer(), sa.ForeignKey("participants.id"),
                  nullable=False),
        sa.Column("idempotency_key", sa.String(length=128), nullable=False),
        sa.Column("payload_sha256", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("contribution_id", sa.Integer(), sa.ForeignKey("contributions.id"),
                  nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("study_id", "number", "participant_id"),
    )
    op.create_table(
        "cohort_results",
        _study(),
        sa.Column("method", sa.String(length=16), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("study_id"),
    )


def downgrade() -> None:
    op.drop_table("cohort_results")
    op.drop_table("cohort_releases")
    op.drop_table("cohort_rounds")
