"""Finding the deployment an admin command acts on: its database and its signing key.

Admin commands read the same settings as ``serve`` (``FEDOD_DATA_DIR``,
``FEDOD_DATABASE_URL``, ``FEDOD_SIGNING_KEY_PATH``). Run from the wrong directory, they must
not quietly start a second, empty deployment: a missing SQLite file or signing key is an
error that names the resolved path and what to do; a schema that is merely behind is
upgraded, and the command says so. Only ``serve``, ``bootstrap``, ``migrate`` (database) and
``rotate-key`` (key) create things.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine

from common.errors import ConfigError


class DeploymentMissing(ConfigError):
    """The database or signing key the settings point at does not exist."""


@dataclass(frozen=True)
class SchemaChange:
    """What :func:`upgrade_schema` did: revisions before and after (None = empty database)."""

    before: str | None
    after: str

    def describe(self, where: str) -> str:
        if self.before is None:
            return f"created a new coordinator database at {where} (schema {self.after})"
        if self.before == self.after:
            return f"database at {where} is already at the latest schema ({self.after})"
        return f"upgraded the database at {where} from schema {self.before} to {self.after}"


def _hint(settings: Any) -> str:
    return (
        f"FEDOD_DATA_DIR is {settings.data_dir} (resolved to {Path(settings.data_dir).resolve()}); "
        "run admin commands with the same FEDOD_DATA_DIR / FEDOD_DATABASE_URL as 'serve'"
    )


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL, or None for other databases and in-memory SQLite."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or ":memory:" in url:
        return None
    return Path(url[len(prefix):].split("?", 1)[0])


def describe_url(url: str) -> str:
    """A URL fit for output: a SQLite path, or the database URL without its password."""
    from sqlalchemy.engine import make_url

    path = sqlite_path(url)
    return str(path) if path else make_url(url).render_as_string(hide_password=True)


def current_revision(url: str) -> str | None:
    """The Alembic revision the database is at (None for an empty database)."""
    from alembic.runtime.migration import MigrationContext

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str:
    """The newest revision the packaged migrations define."""
    from alembic.script import ScriptDirectory

    from coordinator.db.migrate import alembic_config

    return str(ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head())


def upgrade_schema(settings: Any) -> SchemaChange:
    """Create or upgrade the schema of the configured database (``migrate``/``serve``); a new
    SQLite file is created owner-only in an owner-only directory."""
    from coordinator.db.engine import create_sqlite_file
    from coordinator.db.migrate import upgrade

    url = settings.resolved_database_url
    path = sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        create_sqlite_file(url)
    before = current_revision(url)
    upgrade(url)
    return SchemaChange(before, head_revision())


def require_database(settings: Any) -> SchemaChange | None:
    """Check that the database exists; upgrade a schema that is behind.

    Returns the change made, or None when nothing was needed. Raises
    :class:`DeploymentMissing` for a SQLite file that does not exist or an empty database.
    """
    url = settings.resolved_database_url
    path = sqlite_path(url)
    if path is not None and not path.exists():
        raise DeploymentMissing(
            f"no coordinator database at {path}. {_hint(settings)}; to start a new "
            "deployment here, run 'fedod-coordinator migrate' (or 'serve') first"
        )
    before = current_revision(url)
    if before is None:
        raise DeploymentMissing(
            f"the database {describe_url(url)} has no fedod schema; run "
            "'fedod-coordinator migrate' to create it"
        )
    if before == head_revision():
        return None
    return upgrade_schema(settings)


def require_key(settings: Any) -> Path:
    """The signing key path, which must exist (admin commands never create a key)."""
    path = Path(settings.resolved_signing_key_path)
    if not path.exists():
        raise DeploymentMissing(
            f"no signing key at {path}. {_hint(settings)}; the key is created by "
            "'fedod-coordinator serve' or 'bootstrap' (and replaced by 'rotate-key')"
        )
    return path
