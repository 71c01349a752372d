"""Initial schema: participants, studies, aggregates, members, contributions, ledger.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "participants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("eps_cap", sa.BigInteger(), nullable=False),
        sa.Column("delta_cap", sa.BigInteger(), nullable=False),
        sa.Column("eps_spent", sa.BigInteger(), nullable=False),
        sa.Column("delta_spent", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_table(
        "studies",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("config_version", sa.Integer(), nullable=False),
        sa.Column("config_payload", sa.Text(), nullable=False),
        sa.Column("config_signature", sa.String(length=256), nullable=False),
        sa.Column("key_id", sa.String(length=128), nullable=False),
        sa.Column("config_digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "aggregates",
        sa.Column("study_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("contributors", sa.Integer(), nullable=False),
        sa.Column("lsh_sum", sa.LargeBinary(), nullable=False),
        sa.Column("grid_indices", sa.LargeBinary(), nullable=True),
        sa.Column("grid_values", sa.LargeBinary(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["study_id"],
            ["studies.id"],
        ),
        sa.PrimaryKeyConstraint("study_id"),
    )
    op.create_table(
        "contributions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.String(length=64), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=128), nullable=False),
        sa.Column("request_sha256", sa.String(length=64), nullable=False),
        sa.Column("config_version", sa.Integer(), nullable=False),
        sa.Column("eps_units", sa.BigInteger(), nullable=False),
        sa.Column("delta_units", sa.BigInteger(), nullable=False),
        sa.Column("lsh_payload", sa.Text(), nullable=False),
        sa.Column("grid_payload", sa.Text(), nullable=True),
        sa.Column("model_version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
        ),
        sa.ForeignKeyConstraint(
            ["study_id"],
            ["studies.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("participant_id", "idempotency_key"),
    )
    op.create_index("ix_contributions_study_id", "contributions", ["study_id"])

    op.create_table(
        "members",
        sa.Column("study_id", sa.String(length=64), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
        ),
        sa.ForeignKeyConstraint(
            ["study_id"],
            ["studies.id"],
        ),
        sa.PrimaryKeyConstraint("study_id", "participant_id"),
    )
    op.create_table(
        "ledger_entries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("participant_id", sa.Integer(), nullable=False),
        sa.Column("contribution_id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("eps_units", sa.BigInteger(), nullable=False),
        sa.Column("delta_units", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["contribution_id"],
            ["contributions.id"],
        ),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.id"],
        ),
        sa.ForeignKeyConstraint(
            ["study_id"],
            ["studies.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_ledger_entries_contribution_id", "ledger_entries", ["contribution_id"])
    op.create_index("ix_ledger_entries_participant_id", "ledger_entries", ["participant_id"])


def downgrade() -> None:
    op.drop_index("ix_ledger_entries_participant_id", table_name="ledger_entries")
    op.drop_index("ix_ledger_entries_contribution_id", table_name="ledger_entries")

    op.drop_table("ledger_entries")
    op.drop_table("members")
    op.drop_index("ix_contributions_study_id", table_name="contributions")

    op.drop_table("contributions")
    op.drop_table("aggregates")
    op.drop_table("studies")
    op.drop_table("participants")
