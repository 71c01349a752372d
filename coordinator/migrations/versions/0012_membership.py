"""Consortium-certified membership of secure studies (issue 25 item 1).

``study_memberships`` holds one signed membership certificate per study (the latest version
uploaded by the admin, ``PUT /v1/studies/{id}/membership``); rounds are opened with exactly
its certified members.

Revision ID: 0012_membership
Revises: 0011_online_centre
"""

import sqlalchemy as sa
from alembic import op

revision = "0012_membership"
down_revision = "0011_online_centre"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "study_memberships",
        sa.Column("study_id", sa.String(length=64), sa.ForeignKey("studies.id"), primary_key=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("signed", sa.Text(), nullable=False),
        sa.Column("uploaded_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("study_memberships")
