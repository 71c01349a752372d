"""Alembic environment: online migrations against the configured URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from coordinator.db.tables import Base

config = context.config
url = config.get_main_option("sqlalchemy.url")
if url is None:
    raise RuntimeError("alembic: sqlalchemy.url is not set")
engine = create_engine(url, poolclass=pool.NullPool)
with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
