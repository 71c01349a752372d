"""The index behind a participant's latest release: ``(participant_id, study_id, model_version)``.

``charge.LATEST`` is ``max(id)`` of a participant's model releases to a study
(``model_version > 0``). With the index on ``(participant_id, study_id, id)`` SQLite, which
has no statistics, planned it over ``ix_contributions_study_version`` (``study_id = ? AND
model_version > ?`` looked more selective): a scan of every release of the study, twice per
contribution, so ingest slowed as a study grew (6.7 ms against 2.2 ms of server CPU per
contribution with 10,000 contributions merged). On this index all three conditions apply and
it covers the query (``id`` is the row id): the scan is of the caller's own releases to the
study. PostgreSQL uses it the same way.

Revision ID: 0010_latest_index
Revises: 0009_online_schedule
"""

from alembic import op

revision = "0010_latest_index"
down_revision = "0009_online_schedule"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_contributions_latest", table_name="contributions")
    op.create_index("ix_contributions_latest", "contributions",
                    ["participant_id", "study_id", "model_version"])


def downgrade() -> None:
    op.drop_index("ix_contributions_latest", table_name="contributions")
    op.create_index("ix_contributions_latest", "contributions",
                    ["participant_id", "study_id", "id"])
