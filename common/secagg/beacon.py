"""The consortium key holder as a randomness beacon for sparse masking graphs (pure: no I/O).

A sparse masking graph seeded from the coordinator-signed roster alone can be *ground*: the
coordinator tries candidate rosters offline and keeps one whose graph exposes an honest member,
or shows members of one attempt different graphs (docs/TRUST.md). In every study with a sparse
graph (:attr:`AggregationParams.needs_beacon`) the graph is therefore seeded from the roster
digest **and** the consortium key's Ed25519 signature over it (RFC 8032 signatures are
deterministic: one per message), which the coordinator cannot compute when it chooses the
roster:

    message = "fedod-secagg/beacon/1" NUL study NUL round (8 bytes, big-endian)
              attempt (2 bytes, big-endian) roster digest (32 bytes)
    seed    = SHA-256("fedod-secagg/graph/2" NUL roster digest signature)

The study id cannot contain NUL (:data:`common.study.params.StudyId`), so the message is
unambiguous. The consortium key holder signs at most one roster per (study, round, attempt) and no
attempt above :data:`BEACON_ATTEMPTS` (:func:`decide`; ``fedod-consortium beacon`` keeps the
record), so the coordinator gets at most ``A`` draws of the graph per round. A round it aborts
before anyone masks costs nobody anything, so draws are also counted per member across rounds
(:mod:`common.secagg.draws`): a member masks only under one of at most ``G`` draws including
it since its last masked release, and a release is charged ``G`` times the per-graph bound
(:attr:`AggregationParams.graph_delta`). A member verifies the signature under the consortium
key it pinned at enrolment, and refuses an attempt above ``A``, before it reads any data
(:func:`verify_beacon`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from common.errors import SignatureInvalid
from common.secagg.messages import RoundRef, RoundRefused, b64d, b64e

__all__ = ["BEACON_ATTEMPTS", "BeaconRecord", "beacon_message", "sign_beacon",
           "verify_beacon", "beacon_seed", "decide"]

BEACON_ATTEMPTS = 4
"""``A``: attempts per round the consortium beacon signs a roster for (a public constant)."""
TAG = b"fedod-secagg/beacon/1\x00"
SEED_TAG = b"fedod-secagg/graph/2\x00"


def beacon_message(ref: RoundRef, roster_digest: str) -> bytes:
    """The bytes the consortium key signs for the roster ``roster_digest`` of ``ref``."""
    return (TAG + ref.study_id.encode("ascii") + b"\x00" + ref.round.to_bytes(8, "big")
            + ref.attempt.to_bytes(2, "big") + bytes.fromhex(roster_digest))


def sign_beacon(ref: RoundRef, roster_digest: str, key: Ed25519PrivateKey) -> str:
    """The beacon signature (base64 of 64 bytes)."""
    return b64e(key.sign(beacon_message(ref, roster_digest)))


def _check_attempt(ref: RoundRef) -> None:
    if ref.attempt > BEACON_ATTEMPTS:
        raise RoundRefused(
            f"attempt {ref.attempt} of round {ref.round}: the consortium beacon signs at most "
            f"{BEACON_ATTEMPTS} attempts per round (each is a fresh draw of the masking "
            "graph); the round must be abandoned")


def verify_beacon(signature: str | None, ref: RoundRef, roster_digest: str,
                  key: Ed25519PublicKey) -> bytes:
    """The raw beacon signature of the roster, refused (:class:`RoundRefused`) when it is
    missing, does not verify under the consortium key ``key``, or ``ref`` is an attempt
    above :data:`BEACON_ATTEMPTS`."""
    _check_attempt(ref)
    if signature is None:
        raise RoundRefused(
            f"the coordinator served no consortium beacon signature for the roster of "
            f"{ref.round_id}: this study's sparse masking graph is drawn from it; nothing "
            "was read, drawn or sent")
    try:
        raw = b64d(signature, size=64)
        key.verify(raw, beacon_message(ref, roster_digest))
    except (InvalidSignature, SignatureInvalid) as exc:
        raise RoundRefused(
            f"the beacon signature of the roster of {ref.round_id} does not verify under the "
            "consortium key pinned at enrolment: refusing the roster; nothing was read, "
            "drawn or sent") from exc
    return raw


def beacon_seed(roster_digest: str, signature: bytes) -> bytes:
    """The masking graph's seed in a beacon study."""
    return hashlib.sha256(SEED_TAG + bytes.fromhex(roster_digest) + signature).digest()


@dataclass(frozen=True)
class BeaconRecord:
    """One roster the consortium key signed (a line of its append-only record)."""

    study_id: str
    round: int
    attempt: int
    roster_digest: str
    signature: str
    members: tuple[str, ...] = ()
    """The roster's members (common.secagg.draws counts, per member, the rosters that name it)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", tuple(self.members))  # a JSON list, read back


def decide(records: Iterable[BeaconRecord], ref: RoundRef, roster_digest: str
           ) -> BeaconRecord | None:
    """What the beacon may do for this roster: the record of the signature it already made
    for it (a retry re-sends it), or None (sign it); refused (:class:`RoundRefused`) for an
    attempt above :data:`BEACON_ATTEMPTS` or when it signed another roster for that attempt."""
    _check_attempt(ref)
    for r in records:
        if (r.study_id, r.round, r.attempt) != (ref.study_id, ref.round, ref.attempt):
            continue
        if r.roster_digest == roster_digest:
            return r
        raise RoundRefused(
            f"the consortium key already signed another roster ({r.roster_digest[:16]}...) "
            f"for {ref.round_id}: it signs one roster per attempt, so the coordinator cannot "
            "draw the masking graph again without opening a new attempt")
    return None
