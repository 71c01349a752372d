"""The consortium's beacon signature of a round attempt (sparse masking graphs).

``secagg_rounds.beacon`` holds the consortium key's Ed25519 signature over the attempt's
roster (base64, ``POST /v1/studies/{id}/rounds/{n}/beacon``): in a study whose masking graph
bound is not 0 it seeds the graph (common.secagg.beacon). ``secagg_rounds.draws`` holds the
draw count statements posted with it, one per roster member (JSON {name: [count, base64
signature]}, common.secagg.draws); each member is served its own. Null everywhere else.

Revision ID: 0013_beacon
Revises: 0012_membership
"""

import sqlalchemy as sa
from alembic import op

revision = "0013_beacon"
down_revision = "0012_membership"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("secagg_rounds") as batch:
        batch.add_column(sa.Column("beacon", sa.String(length=88), nullable=True))
        batch.add_column(sa.Column("draws", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("secagg_rounds") as batch:
        batch.drop_column("draws")
        batch.drop_column("beacon")
