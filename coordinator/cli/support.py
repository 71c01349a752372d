"""What every ``fedod-coordinator`` command shares: exit codes, settings, a session on the
deployment's database, the signing key store, JSON printing, and ``migrate`` (which
``bootstrap`` runs too)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_CONFIG, EXIT_DATABASE = 0, 1, 2, 3, 4


def load_settings() -> Any:
    from coordinator.config import Settings

    return Settings()


def open_session(settings: Any) -> Any:
    """A session on the deployment's existing database (schema upgraded if behind)."""
    from coordinator.cli.deployment import describe_url, require_database
    from coordinator.db.engine import make_engine, make_sessionmaker

    change = require_database(settings)
    if change is not None:
        print(change.describe(describe_url(settings.resolved_database_url)), file=sys.stderr)
    return make_sessionmaker(make_engine(settings.resolved_database_url))()


def key_store(settings: Any, *, existing: bool = False) -> Any:
    """The signing key store; ``existing`` refuses a missing key instead of creating one."""
    from coordinator.cli.deployment import require_key
    from coordinator.keys import KeyStore

    if existing:
        require_key(settings)
    return KeyStore(settings.resolved_signing_key_path)


def print_json(obj: Any) -> None:
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump(mode="json")
    print(json.dumps(obj, indent=2, default=str))


def cmd_migrate(args: argparse.Namespace, settings: Any) -> int:
    from coordinator.cli.deployment import describe_url, upgrade_schema

    change = upgrade_schema(settings)
    print(change.describe(describe_url(settings.resolved_database_url)), file=sys.stderr)
    return EXIT_OK
