"""Per-member draw counters signed by the consortium beacon (pure: no I/O).

The beacon (:mod:`common.secagg.beacon`) caps the draws of the masking graph per round number,
but a coordinator may abort a round after seeing its graph, before anyone masked (nobody is
charged), and open the next round number: a fresh draw. So with every roster it signs the
consortium key also signs, for each member ``m`` of that roster, how many rosters of the study
it has signed that include ``m`` (this one included), ``c_m``:

    statement = "fedod-secagg/draws/1" NUL study NUL round (8 bytes, big-endian)
                attempt (2 bytes, big-endian) roster digest (32 bytes)
                member name NUL c_m (8 bytes, big-endian)

The study id and the member names cannot contain NUL (:data:`common.study.params.StudyId`; a name
with one is refused here), so the statement is unambiguous. A member verifies its own statement
under the consortium key it pinned, and masks only if ``c_m - c_last <= G``
(:data:`BEACON_DRAWS`), ``c_last`` the count of the last draw it masked under in the study (0
before its first): the graph it masks under is one of at most ``G`` draws that included it
since its last masked release, whatever the coordinator aborted, and a release is charged
``G`` times the per-graph bound (:attr:`AggregationParams.graph_delta`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from common.errors import SignatureInvalid
from common.secagg.beacon import BeaconRecord
from common.secagg.messages import RoundRef, RoundRefused, b64d, b64e

__all__ = ["BEACON_DRAWS", "draw_message", "sign_draw", "verify_draw", "check_gap",
           "draw_counts"]

BEACON_DRAWS = 8
"""``G``: beacon draws including a member it accepts between two of its masked releases (the
``A`` attempts of its own round plus slack for honest crashes; a public constant)."""
TAG = b"fedod-secagg/draws/1\x00"


def draw_message(ref: RoundRef, roster_digest: str, member: str, count: int) -> bytes:
    """The bytes the consortium key signs: ``member``'s ``count``-th draw, this roster."""
    if "\x00" in member:
        raise RoundRefused(f"member name {member!r} contains NUL: no draw statement for it")
    if not 1 <= count < 2**63:
        raise RoundRefused(f"draw count {count} out of range")
    return (TAG + ref.study_id.encode("ascii") + b"\x00" + ref.round.to_bytes(8, "big")
            + ref.attempt.to_bytes(2, "big") + bytes.fromhex(roster_digest)
            + member.encode("utf-8") + b"\x00" + count.to_bytes(8, "big"))


def sign_draw(ref: RoundRef, roster_digest: str, member: str, count: int,
              key: Ed25519PrivateKey) -> str:
    """The statement's signature (base64 of 64 bytes; Ed25519 is deterministic)."""
    return b64e(key.sign(draw_message(ref, roster_digest, member, count)))


def verify_draw(ref: RoundRef, roster_digest: str, member: str, count: int, signature: str,
                key: Ed25519PublicKey) -> None:
    """Refuse (:class:`RoundRefused`) a statement that does not verify under ``key``."""
    try:
        key.verify(b64d(signature, size=64), draw_message(ref, roster_digest, member, count))
    except (InvalidSignature, SignatureInvalid) as exc:
        raise RoundRefused(
            f"the beacon's draw count {count} for {member} in {ref.round_id} does not verify "
            "under the consortium key") from exc


def check_gap(count: int, last: int, ref: RoundRef, member: str) -> None:
    """Refuse (:class:`RoundRefused`) to mask under a draw more than :data:`BEACON_DRAWS`
    draws including ``member`` after ``last``, the draw of its last masked release, or under
    a draw older than ``last`` (a replayed roster: each release must mask under a draw of its
    own window ``(last, last + G]``, or re-send the one of ``last`` itself)."""
    if count < last:
        raise RoundRefused(
            f"{ref.round_id} is draw {count} of the masking graph including {member}, older "
            f"than draw {last} it last masked under: a replayed roster. Refusing to mask; "
            "nothing was read or sent")
    if count - last > BEACON_DRAWS:
        raise RoundRefused(
            f"{ref.round_id} is draw {count} of the masking graph including {member}, "
            f"{count - last} since its last masked release (draw {last}); at most "
            f"{BEACON_DRAWS} are charged: the coordinator aborted too many draws including "
            "this member since its last release (it may be grinding the graph). Refusing to "
            "mask; nothing was read or sent")


def draw_counts(records: Sequence[BeaconRecord], done: BeaconRecord) -> dict[str, int]:
    """``c_m`` for each member of the signed roster ``done`` (a line of ``records``, the
    beacon's append-only record in order): the rosters of its study up to and including
    ``done`` that name ``m``. A retry of ``done`` gets the same counts."""
    upto = list(records[:records.index(done) + 1]) if done in records else [*records, done]
    seen: Counter[str] = Counter()
    for r in upto:
        if r.study_id == done.study_id:
            seen.update(set(r.members))
    return {m: seen[m] for m in done.members}
