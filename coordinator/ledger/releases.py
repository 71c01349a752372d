"""What the ledger writer (:mod:`coordinator.ledger.charge`) takes and gives back.

:class:`PendingRelease` is an LSH contribution validated and ready to charge and store;
:class:`Stored` is what its response needs once stored; :class:`Item` is a charge that is not
an LSH contribution (a secure round's masked vector, an online gradient, a cohort release),
itemised on the ledger and kept out of the model (``coordinator.db.tables.OUTSIDE_MODEL``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, bindparam, select

from common.budget import PrivacyBudget
from coordinator.db.tables import Contribution

PREVIOUS = select(Contribution.id, Contribution.request_sha256).where(
    Contribution.participant_id == bindparam("pid"),
    Contribution.study_id == bindparam("sid"),
    Contribution.idempotency_key == bindparam("key"),
)


@dataclass(frozen=True)
class Stored:
    """What the response needs of a just-inserted contribution."""

    id: int
    study_id: str
    config_version: int
    eps_units: int
    delta_units: int
    created_at: datetime
    model_version: int


@dataclass(frozen=True)
class PendingRelease:
    """One validated LSH release, ready to charge and store (payloads as they arrived)."""

    participant_id: int
    study_id: str
    idempotency_key: str
    request_sha256: str
    config_version: int
    eps_units: int
    delta_units: int
    lsh_payload: str
    grid_payload: str | None

    @property
    def kind(self) -> str:
        """The ledger entry's kind."""
        return "lsh" if self.grid_payload is None else "lsh+grid"

    def stored(self, contribution_id: int, created_at: datetime, model_version: int) -> Stored:
        """What the response needs once this release is the contribution ``contribution_id``."""
        return Stored(contribution_id, self.study_id, self.config_version, self.eps_units,
                      self.delta_units, created_at, model_version)


@dataclass(frozen=True)
class Item:
    """A charge that is not an LSH contribution, as its ledger row lists it.

    ``cost`` is the one value the release was checked against (its claimed cost, or the
    config's for a secure round), computed once per request; ``key`` is the contribution
    row's idempotency key (one charge per key); ``payload`` what the row keeps of it.
    """

    participant_id: int
    study_id: str
    key: str
    digest: str
    config_version: int
    cost: PrivacyBudget
    payload: str
    kind: str


def previous(conn: Connection, participant_id: int, study_id: str, key: str) -> tuple[int, str]:
    """``(id, request digest)`` of the release stored under this key, or ``(0, "")``."""
    row = conn.execute(PREVIOUS, {"pid": participant_id, "sid": study_id, "key": key}).first()
    return (row[0], row[1]) if row is not None else (0, "")
