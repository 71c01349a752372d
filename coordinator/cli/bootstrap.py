"""``fedod-coordinator bootstrap``: set up a deployment from files, idempotently.

Creates the database schema and signing key if missing, the study from a StudyCreate JSON file
unless it exists, and each named participant unless it exists, writing its credential and the
key fingerprint into ``<secrets-dir>/<participant>/token`` and ``.../fingerprint`` (0600), the
files a participant host needs to enrol. Rerunning it changes nothing that already exists, so
an init container can restart safely. A participant that exists without its token file is an
error (the coordinator keeps only a hash): revoke it and enrol a new name.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from common.budget import PrivacyBudget
from common.errors import Conflict
from common.wire.schemas import StudyCreate


def _write_secret(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def bootstrap(args: argparse.Namespace, session: Any, keys: Any) -> list[str]:
    """Do the work; return what was created (for the log)."""
    from coordinator.db.tables import Participant, Study
    from coordinator.services.participants import create_participant
    from coordinator.services.studies import add_member, create_study

    done = []
    body = StudyCreate.model_validate_json(Path(args.study).read_text())
    if session.get(Study, body.study_id) is None:
        create_study(session, keys, body)
        done.append(f"study {body.study_id}")
    cap = PrivacyBudget(args.epsilon_cap, args.delta_cap)
    secrets_dir = Path(args.secrets_dir)
    for name in args.participant:
        token_file = secrets_dir / name / "token"
        exists = session.query(Participant).filter_by(name=name).one_or_none() is not None
        if exists and not token_file.exists():
            raise Conflict(f"participant {name!r} exists but {token_file} is missing; the "
                           "credential cannot be shown again: revoke it and enrol a new name")
        if not exists:
            _, token = create_participant(session, name, cap)
            _write_secret(token_file, token)
            done.append(f"participant {name}")
        _write_secret(secrets_dir / name / "fingerprint", keys.key_id())
        add_member(session, body.study_id, name)
    return done


def cmd_bootstrap(args: argparse.Namespace, settings: Any) -> int:
    from coordinator.cli.support import cmd_migrate, key_store, open_session

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    cmd_migrate(args, settings)
    keys = key_store(settings)
    keys.ensure()
    with open_session(settings) as session:
        done = bootstrap(args, session, keys)
    print("created: " + (", ".join(done) or "nothing (already set up)"), file=sys.stderr)
    return 0


def add_parser(add: Any) -> None:
    """Register the subcommand (``add`` is ``build_parser``'s helper)."""
    p = add("bootstrap", cmd_bootstrap, "idempotent set-up from files: schema, key, a study "
            "from a StudyCreate JSON file, participants with credential and fingerprint files "
            "in --secrets-dir/<name>/")
    p.add_argument("--study", required=True, metavar="FILE", help="StudyCreate JSON file")
    p.add_argument("--participant", action="append", default=[], metavar="NAME",
                   help="participant to enrol and add to the study (repeatable)")
    p.add_argument("--epsilon-cap", required=True, help="epsilon cap of new participants")
    p.add_argument("--delta-cap", default="0", help="delta cap of new participants (0)")
    p.add_argument("--secrets-dir", required=True, metavar="DIR",
                   help="where <name>/token and <name>/fingerprint are written (0600)")
