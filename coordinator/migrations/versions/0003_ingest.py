"""Ingest layout: sums folded from contributions, one release per participant, scoped keys.

- ``aggregate_snapshots`` holds the merged sums; ``aggregates`` keeps only the counter
  (version, contributors) that ingest bumps, so a contribution never rewrites the model.
- ``contributions.replaces_id``: the same participant's previous release for the study, which
  the new one supersedes in the model (backfilled here); ``contributors`` becomes the number
  of distinct participants. The snapshot starts at version 0: the first model read folds every
  stored contribution under the new rule.
- Idempotency keys are unique per (participant, study), no longer per participant.
- PostgreSQL: the payload and sum columns are stored ``EXTERNAL`` (no TOAST compression of
  already-compressed or noisy bytes).

Revision ID: 0003_ingest
Revises: 0002_hardening
"""

import sqlalchemy as sa
from alembic import op

revision = "0003_ingest"
down_revision = "0002_hardening"
branch_labels = None
depends_on = None

_OLD_UNIQUE = "contributions_participant_id_idempotency_key_key"  # PostgreSQL's name
_NAMES = {"uq": "%(table_name)s_%(column_0_N_name)s_key"}  # the same name for SQLite's
_SUMS = ("lsh_sum", "grid_indices", "grid_values")


def _external(table: str, columns: tuple[str, ...]) -> None:
    if op.get_bind().dialect.name == "postgresql":
        alter = ", ".join(f"ALTER COLUMN {c} SET STORAGE EXTERNAL" for c in columns)
        op.execute(f"ALTER TABLE {table} {alter}")


def upgrade() -> None:
    op.create_table(
        "aggregate_snapshots",
        sa.Column("study_id", sa.String(length=64), sa.ForeignKey("studies.id"), primary_key=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("contributors", sa.Integer(), nullable=False),
        sa.Column("lsh_sum", sa.LargeBinary(), nullable=False),
        sa.Column("grid_indices", sa.LargeBinary(), nullable=True),
        sa.Column("grid_values", sa.LargeBinary(), nullable=True),
    )
    _external("aggregate_snapshots", _SUMS)
    _external("contributions", ("lsh_payload", "grid_payload"))
    op.execute(
        "INSERT INTO aggregate_snapshots (study_id, version, contributors, lsh_sum) "
        "SELECT study_id, 0, 0, '' FROM aggregates"
    )
    with op.batch_alter_table("aggregates") as batch:
        for column in _SUMS:
            batch.drop_column(column)
    with op.batch_alter_table("contributions", naming_convention=_NAMES) as batch:
        batch.add_column(sa.Column("replaces_id", sa.Integer(), nullable=True))
        batch.drop_constraint(_OLD_UNIQUE, type_="unique")
        batch.create_unique_constraint(
            "uq_contributions_key", ["participant_id", "study_id", "idempotency_key"]
        )
        batch.drop_index("ix_contributions_study_id")
        batch.create_index("ix_contributions_latest", ["participant_id", "study_id", "id"])
        batch.create_index("ix_contributions_study_version", ["study_id", "model_version"])
    op.execute(
        "UPDATE contributions SET replaces_id = (SELECT max(p.id) FROM contributions p "
        "WHERE p.participant_id = contributions.participant_id "
        "AND p.study_id = contributions.study_id AND p.id < contributions.id)"
    )
    op.execute(
        "UPDATE aggregates SET contributors = (SELECT count(DISTINCT c.participant_id) "
        "FROM contributions c WHERE c.study_id = aggregates.study_id)"
    )


def downgrade() -> None:
    """Back to one blob per study (the folded sums as of the last model read)."""
    with op.batch_alter_table("aggregates") as batch:
        batch.add_column(sa.Column("lsh_sum", sa.LargeBinary(), nullable=False, server_default=""))
        batch.add_column(sa.Column("grid_indices", sa.LargeBinary(), nullable=True))
        batch.add_column(sa.Column("grid_values", sa.LargeBinary(), nullable=True))
    for column in _SUMS:
        op.execute(
            f"UPDATE aggregates SET {column} = (SELECT s.{column} FROM aggregate_snapshots s "
            "WHERE s.study_id = aggregates.study_id)"
        )
    op.drop_table("aggregate_snapshots")
    with op.batch_alter_table("contributions") as batch:
        batch.drop_index("ix_contributions_study_version")
        batch.drop_index("ix_contributions_latest")
        batch.create_index("ix_contributions_study_id", ["study_id"])
        batch.drop_constraint("uq_contributions_key", type_="unique")
        batch.create_unique_constraint(_OLD_UNIQUE, ["participant_id", "idempotency_key"])
        batch.drop_column("replaces_id")
