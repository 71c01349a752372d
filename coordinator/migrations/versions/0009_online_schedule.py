"""Streaming mode on a public schedule: each gradient release names the window it closes.

Revision ID: 0009_online_schedule
Revises: 0008_online
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_online_schedule"
down_revision = "0008_online"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("online_releases") as batch:
        batch.add_column(sa.Column("schedule_window", sa.Integer(), nullable=True))
    op.create_index("ux_online_releases_window", "online_releases",
                    ["participant_id", "study_id", "schedule_window"], unique=True)


def downgrade() -> None:
    op.drop_index("ux_online_releases_window", table_name="online_releases")
    with op.batch_alter_table("online_releases") as batch:
        batch.drop_column("schedule_window")
