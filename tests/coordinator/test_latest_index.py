"""A contribution's ``LATEST`` lookup (the caller's previous model release to the study) runs
on ``ix_contributions_latest``, so its cost does not grow with the study's other releases.

SQLite has no statistics unless ANALYZE ran; before migration 0010 it planned ``LATEST`` over
``ix_contributions_study_version`` (every release of the study) and ingest slowed from
2.2 ms to 6.7 ms of server CPU per contribution at 10,000 merged (BENCHMARKS.md).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command

from coordinator.db.migrate import alembic_config
from coordinator.ledger import charge


def test_sqlite_plans_latest_on_the_participants_own_releases(tmp_path):
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    command.upgrade(alembic_config(url), "head")
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            for statement in (charge.BUMP, charge.INSERT_CONTRIBUTION):
                sql = str(statement.compile(dialect=conn.dialect))
                plan = " | ".join(row[3] for row in conn.exec_driver_sql(
                    "EXPLAIN QUERY PLAN " + sql, (0,) * sql.count("?")))
                assert "INDEX ix_contributions_latest (participant_id=? AND study_id=? AND " \
                       "model_version>?)" in plan, plan
                assert "ix_contributions_study_version" not in plan, plan
    finally:
        engine.dispose()
