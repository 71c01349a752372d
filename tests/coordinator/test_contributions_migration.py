"""Migration 0003_ingest on SQLite and PostgreSQL: data carried over under the new rules."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from coordinator.db.migrate import alembic_config
from coordinator.db.tables import Base

ROWS = [(1, 1), (2, 2), (3, 1), (4, 1)]  # (contribution id = model version, participant id)


def _seed_0001(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO studies VALUES ('s', 1, '{}', 'sig', 'k', 'd', CURRENT_TIMESTAMP)"))
        for pid in (1, 2):
            conn.execute(sa.text(
                "INSERT INTO participants (id, name, token_hash, active, eps_cap, delta_cap, "
                "eps_spent, delta_spent, created_at) VALUES "
                "(:i, :n, :t, true, 10, 0, 0, 0, CURRENT_TIMESTAMP)"),
                {"i": pid, "n": f"h{pid}", "t": f"{pid:064d}"})
        conn.execute(sa.text(
            "INSERT INTO aggregates VALUES ('s', 4, 4, :b, NULL, NULL, CURRENT_TIMESTAMP)"),
            {"b": b"\0" * 8})
        for cid, pid in ROWS:
            conn.execute(sa.text(
                "INSERT INTO contributions (id, study_id, participant_id, idempotency_key, "
                "request_sha256, config_version, eps_units, delta_units, lsh_payload, "
                "model_version, created_at) VALUES (:c, 's', :p, :k, 'h', 1, 1, 0, '{}', :c, "
                "CURRENT_TIMESTAMP)"), {"c": cid, "p": pid, "k": f"key-{cid:016d}"})


def test_upgrade_backfills_replacements_and_counts_participants(db_url):
    cfg = alembic_config(db_url)
    command.upgrade(cfg, "0001")
    engine = sa.create_engine(db_url)
    try:
        _seed_0001(engine)
        command.upgrade(cfg, "head")  # through 0003_ingest and every later revision
        with engine.connect() as conn:
            chain = conn.execute(sa.text(
                "SELECT id, replaces_id FROM contributions ORDER BY id")).all()
            counter = conn.execute(sa.text("SELECT version, contributors FROM aggregates")).one()
            snapshot = conn.execute(sa.text(
                "SELECT version, contributors FROM aggregate_snapshots")).one()
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        assert [tuple(r) for r in chain] == [(1, None), (2, None), (3, 1), (4, 3)]
        assert tuple(counter) == (4, 2)
        assert tuple(snapshot) == (0, 0)  # the first read folds every release again
        command.downgrade(cfg, "0001")
        command.upgrade(cfg, "head")
    finally:
        command.downgrade(cfg, "base")
        with engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE IF EXISTS alembic_version"))
        engine.dispose()
