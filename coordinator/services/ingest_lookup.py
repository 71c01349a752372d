"""The ingest path's one read: caller, study, membership and a used key in a single query.

The contribution route needs, before it may decode a body: the participant holding the
credential (active, spent, cap), the study (its current config), whether the participant is a
member, and whether this idempotency key was already used by this participant for this study.
Read separately that was four ORM queries (three in the shared permission dependencies, one
idempotency lookup); here it is one prebuilt Core statement, looked up by the credential's
hash. Nothing is cached between requests: a revoked credential is refused on its next request
(the write transaction's conditional charge checks ``active`` again under the row lock).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, select, text

from common.budget import PrivacyBudget
from coordinator.db import driver_sql
from coordinator.db.tables import Contribution, Member, Participant, Study
from coordinator.services.participants import hash_token

LOOKUP = (
    select(
        Participant.id,
        Participant.name,
        Participant.token_hash,
        Participant.active,
        Participant.eps_spent,
        Participant.delta_spent,
        Participant.eps_cap,
        Participant.delta_cap,
        Study.id,
        Study.config_version,
        Study.config_digest,
        Study.config_payload,
        Member.participant_id,
        Contribution.id,
        Contribution.request_sha256,
    )
    .select_from(Participant)
    .outerjoin(Study, Study.id == bindparam("sid"))
    .outerjoin(
        Member, (Member.study_id == Study.id) & (Member.participant_id == Participant.id)
    )
    .outerjoin(
        Contribution,
        (Contribution.participant_id == Participant.id)
        & (Contribution.study_id == Study.id)
        & (Contribution.idempotency_key == bindparam("key")),
    )
    .where(Participant.token_hash == bindparam("hash"))
)


@dataclass(frozen=True)
class IngestCaller:
    """One row of :data:`LOOKUP`: who calls, for which study, and a previous use of the key.

    ``study_id`` is None for an unknown study; ``previous_id`` is 0 when the key is unused.
    """

    participant_id: int
    name: str
    active: bool
    eps_spent: int
    delta_spent: int
    eps_cap: int
    delta_cap: int
    study_id: str | None
    config_version: int
    config_digest: str
    config_payload: str
    member: bool
    previous_id: int
    previous_sha256: str

    @property
    def spent(self) -> PrivacyBudget:
        return PrivacyBudget.from_units(self.eps_spent, self.delta_spent)

    @property
    def cap(self) -> PrivacyBudget:
        return PrivacyBudget.from_units(self.eps_cap, self.delta_cap)


def lookup(conn: Connection, token: str, study_id: str, key: str) -> IngestCaller | None:
    """The caller holding ``token`` (active or not) with the study and key, or None."""
    digest = hash_token(token)
    rows = driver_sql.fetch(conn, LOOKUP, {"hash": digest, "sid": study_id, "key": key})
    return _caller(rows[0] if rows else None, digest)  # token_hash is unique; joins add <= 1


LOOKUP_MANY = text(
    """
SELECT p.id, p.name, p.token_hash, p.active, p.eps_spent, p.delta_spent, p.eps_cap,
    p.delta_cap, s.id, s.config_version, s.config_digest, s.config_payload, m.participant_id,
    c.id, c.request_sha256, k.i
FROM unnest(CAST(:hashes AS text[]), CAST(:sids AS text[]), CAST(:keys AS text[]))
    WITH ORDINALITY AS k(hash, sid, key, i)
JOIN participants p ON p.token_hash = k.hash
LEFT JOIN studies s ON s.id = k.sid
LEFT JOIN members m ON m.study_id = s.id AND m.participant_id = p.id
LEFT JOIN contributions c
    ON c.participant_id = p.id AND c.study_id = s.id AND c.idempotency_key = k.key
"""
)


def lookup_many(
    conn: Connection, wanted: list[tuple[str, str, str]]
) -> list[IngestCaller | None]:
    """:func:`lookup` of each ``(token, study_id, key)``: on PostgreSQL in one query."""
    if conn.dialect.name != "postgresql":
        return [lookup(conn, *one) for one in wanted]
    digests = [hash_token(token) for token, _, _ in wanted]
    params = {"hashes": digests, "sids": [w[1] for w in wanted], "keys": [w[2] for w in wanted]}
    found: list[IngestCaller | None] = [None] * len(wanted)
    for row in driver_sql.fetch(conn, LOOKUP_MANY, params):
        i = row[-1] - 1
        found[i] = _caller(row[:-1], digests[i])
    return found


def _caller(row: Sequence[Any] | None, digest: str) -> IngestCaller | None:
    if row is None or not hmac.compare_digest(row[2], digest):
        return None
    (pid, name, _, active, eps_spent, delta_spent, eps_cap, delta_cap,
     sid, version, config_digest, payload, member, previous, previous_sha) = row
    return IngestCaller(
        pid, name, bool(active), eps_spent, delta_spent, eps_cap, delta_cap,
        sid, version or 0, config_digest or "", payload or "", member is not None,
        previous or 0, previous_sha or "",
    )
