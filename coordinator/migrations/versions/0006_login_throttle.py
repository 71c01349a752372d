"""Login throttle in the database: failed dashboard logins per client address (all workers).

Revision ID: 0006_login_throttle
Revises: 0005_refusals
"""

import sqlalchemy as sa
from alembic import op

revision = "0006_login_throttle"
down_revision = "0005_refusals"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "login_clients",
        sa.Column("client", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("client"),
    )
    op.create_table(
        "login_failures",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("client", sa.String(length=64), nullable=False),
        sa.Column("failed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_login_failures_client", "login_failures", ["client"])
    op.create_index("ix_login_failures_failed_at", "login_failures", ["failed_at"])


def downgrade() -> None:
    op.drop_index("ix_login_failures_failed_at", table_name="login_failures")
    op.drop_index("ix_login_failures_client", table_name="login_failures")
    op.drop_table("login_failures")
    op.drop_table("login_clients")
