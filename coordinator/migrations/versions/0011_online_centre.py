"""Streaming mode with centring: centring releases and the centre they sum to.

``online_releases.centring`` marks a release of the config's centring window (summed into the
centre, never into an SGD step); ``online_models.centre_sum`` (base64 float64, null until the
first centring release) and ``centre_releases`` (how many it holds) give the centre served.
Existing rows are gradient releases and models without a centre.

Revision ID: 0011_online_centre
Revises: 0010_latest_index
"""

import sqlalchemy as sa
from alembic import op

revision = "0011_online_centre"
down_revision = "0010_latest_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("online_releases") as batch:
        batch.add_column(sa.Column("centring", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
    with op.batch_alter_table("online_models") as batch:
        batch.add_column(sa.Column("centre_sum", sa.Text(), nullable=True))
        batch.add_column(sa.Column("centre_releases", sa.Integer(), nullable=False,
                                   server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("online_models") as batch:
        batch.drop_column("centre_releases")
        batch.drop_column("centre_sum")
    with op.batch_alter_table("online_releases") as batch:
        batch.drop_column("centring")
