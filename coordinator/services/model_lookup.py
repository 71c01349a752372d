"""The model read's one query: caller, study, membership and model version together.

A model GET needed the participant holding the credential, the study, the membership and the
model counter: four ORM queries (``get_caller``, then ``study_reader``'s two, then the
version), 2.6 ms of server CPU per GET, at 0.13-0.24 of the GETs/s of a bare endpoint serving
the same bytes (BENCHMARKS, "model GETs in one query"). Here it is one prebuilt statement on
the driver's cursor (``db.driver_sql``), as ingest does (``services.ingest_lookup``).
Nothing is cached between requests: a revoked credential is refused on its next request.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from sqlalchemy import Connection, bindparam, select

from coordinator.db import driver_sql
from coordinator.db.tables import Aggregate, Member, Participant, Study
from coordinator.services.participants import hash_token

_STUDY = (Study.id, Study.config_payload, Aggregate.version)
PARTICIPANT_READ = (
    select(Participant.token_hash, Participant.name, Participant.active,
           Member.participant_id, *_STUDY)
    .select_from(Participant)
    .outerjoin(Study, Study.id == bindparam("sid"))
    .outerjoin(Aggregate, Aggregate.study_id == Study.id)
    .outerjoin(Member, (Member.study_id == Study.id) & (Member.participant_id == Participant.id))
    .where(Participant.token_hash == bindparam("hash"))
)
ADMIN_READ = (
    select(*_STUDY)
    .select_from(Study)
    .outerjoin(Aggregate, Aggregate.study_id == Study.id)
    .where(Study.id == bindparam("sid"))
)


@dataclass(frozen=True)
class ModelReader:
    """Who reads which model: ``name`` is None for the admin (active and ``member`` of every
    study); ``study_id`` is None for an unknown study."""

    name: str | None
    active: bool
    member: bool
    study_id: str | None
    config_payload: str
    version: int


def lookup(conn: Connection, study_id: str, token: str | None) -> ModelReader | None:
    """The reader of ``study_id``: the admin (``token`` None) or the participant holding
    ``token`` (active or not; None if no participant holds it)."""
    if token is None:
        rows = driver_sql.fetch(conn, ADMIN_READ, {"sid": study_id})
        sid, payload, version = rows[0] if rows else (None, "", 0)
        return ModelReader(None, True, True, sid, payload or "", version or 0)
    digest = hash_token(token)
    rows = driver_sql.fetch(conn, PARTICIPANT_READ, {"hash": digest, "sid": study_id})
    if not rows or not hmac.compare_digest(rows[0][0], digest):  # token_hash is unique
        return None
    _, name, active, member, sid, payload, version = rows[0]
    return ModelReader(name, bool(active), member is not None, sid, payload or "", version or 0)
