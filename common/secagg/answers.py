"""The member's answers after masking: its unmask and recover frames (pure: no I/O, no clock).

After :func:`common.secagg.participant.mask_upload` the agent (``participant/secagg/round.py``)
calls :func:`answer_unmask` and, only if members were lost after masking, :func:`answer_recover`.
Each refuses what an honest participant must never accept: a forged or foreign signature, a
request of another study / round / attempt or roster (including a roster other than the one it
masked under, ``masked_roster``), and an unmask request that would reveal a partial sum, a sum
over fewer than ``h_min`` participants, or this participant's noisy vector in a second attempt.
Shares of other members' seeds are revealed only for members named in a signed recover request
of the very attempt this participant helped unmask.
"""

from __future__ import annotations

from collections.abc import Callable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from common.secagg.keys import RoundSecrets, ack_key, share_aad, share_key
from common.secagg.messages import (
    RecoverBody,
    RequestBody,
    RoundRefused,
    SignedMessage,
    b64d,
    open_message,
)
from common.secagg.params import AggregationParams
from common.secagg.participant import same_ref
from common.secagg.roster import VerifiedRoster, unpack_for
from common.secagg.shares import ShareOpenError, open_share
from common.secagg.wire import ACK_TAG_BYTES, check_ack_tag, sign_frame

__all__ = ["answer_unmask", "answer_recover"]

def answer_unmask(
    signed: SignedMessage,
    roster: VerifiedRoster,
    *,
    me: str,
    identity: Ed25519PrivateKey,
    secrets: RoundSecrets,
    acks: str,
    coordinator_key: Ed25519PublicKey,
    params: AggregationParams,
    unmasked_attempt: int | None,
    masked_attempt: int | None,
    record: Callable[[int], None],
    masked_roster: str | None = None,
) -> bytes:
    """Answer an unmask request with b_u (the unmask frame), or refuse it.

    ``unmasked_attempt`` is the attempt of this round that this participant already helped
    unmask and ``masked_attempt`` the last attempt it masked (both from its durable state): it
    helps only the last attempt it masked, so once it masked a later attempt no earlier one
    can be revealed with its help (common.secagg.params); ``acks`` are its graph neighbours'
    roster acknowledgements, served beside the request. ``record(attempt)`` must persist the
    new one durably and is called before the answer exists, so a crash can never leave an
    answer unrecorded. ``masked_roster``: the digest of the roster it masked under (stored
    with its frame); a roster served later in the same attempt must be that one, so a
    coordinator cannot change the member's graph neighbours after it masked.
    """
    request = open_message(signed, "request", RequestBody, coordinator_key)
    same_ref(request, roster.body, "unmask request")
    _masked_under(roster, masked_roster)
    if request.roster_digest != roster.digest:
        raise RoundRefused("unmask request names another roster")
    if request.included != len(roster.names):
        raise RoundRefused(
            "unmask request does not include every roster member's vector: a partial sum is "
            "never revealed (the round must restart without the missing members)"
        )
    if masked_attempt != request.attempt:
        raise RoundRefused(
            f"{me} last masked attempt {masked_attempt} of round {request.round}: it helps "
            f"unmask no other attempt (asked for {request.attempt})")
    held = unpack_for(roster, me, acks, ACK_TAG_BYTES) or {}
    for name in roster.holders(me):  # split view: my neighbours masked under MY roster
        tag = held.get(name)
        key = ack_key(secrets.round_key, roster.members[name], roster.members[me],
                      roster.body.round_id, roster.digest)
        if tag is None or not check_ack_tag(tag, key, roster.body, name, me, roster.digest):
            raise RoundRefused(
                f"{name} did not acknowledge the roster {me} masked under: the coordinator "
                "may have shown members different rosters (split view); no unmask answer "
                "leaves")
    h_min = params.require_h_min()
    if request.included < max(h_min, params.min_roster):
        raise RoundRefused(f"refusing to reveal a sum over fewer than {h_min} participants")
    if unmasked_attempt is not None and unmasked_attempt != request.attempt:
        raise RoundRefused(
            f"this participant's noisy vector was already unmasked in attempt "
            f"{unmasked_attempt} of round {request.round}; it never enters a second sum"
        )
    record(request.attempt)
    return sign_frame("unmask", request, me, secrets.self_seed, identity, roster.digest)


def _masked_under(roster: VerifiedRoster, masked_roster: str | None) -> None:
    if masked_roster is not None and masked_roster != roster.digest:
        raise RoundRefused(
            "the coordinator now serves another roster than the one this member masked under "
            "in this attempt (other graph neighbours): no answer leaves")


def answer_recover(
    signed: SignedMessage,
    roster: VerifiedRoster,
    *,
    me: str,
    identity: Ed25519PrivateKey,
    secrets: RoundSecrets,
    inbox: dict[str, str],
    coordinator_key: Ed25519PublicKey,
    unmasked_attempt: int | None,
    masked_attempt: int | None,
    masked_roster: str | None = None,
) -> bytes:
    """The shares this member holds of the seeds of members lost after masking.

    Only for the attempt this member itself helped unmask (so a recovered seed can only
    complete the one sum it agreed to), and only for roster members other than itself."""
    request = open_message(signed, "recover", RecoverBody, coordinator_key)
    same_ref(request, roster.body, "recover request")
    _masked_under(roster, masked_roster)
    if request.roster_digest != roster.digest:
        raise RoundRefused("recover request names another roster")
    if unmasked_attempt != request.attempt or masked_attempt != request.attempt:
        raise RoundRefused(
            f"{me} did not answer the unmask request of attempt {request.attempt}: it reveals "
            "no shares for it"
        )
    missing = set(request.missing)
    if me in missing or not missing <= set(roster.names):
        raise RoundRefused("recover request names members outside the roster, or me")
    missing &= set(roster.holders(me))  # I hold shares of my graph neighbours only
    mine = roster.members[me]
    held: dict[str, bytes] = {}
    for owner in sorted(missing):
        if owner not in inbox:
            raise RoundRefused(f"no share of {owner}'s seed was forwarded; cannot recover it")
        key = share_key(secrets.round_key, roster.members[owner], mine, request.round_id,
                        roster.digest)
        try:
            share = open_share(key, b64d(inbox[owner]),
                               share_aad(request.round_id, owner, me, roster.digest))
        except ShareOpenError as exc:
            raise RoundRefused(
                f"the share of {owner}'s seed does not authenticate for {me} in "
                f"{request.round_id}: altered, replayed or misrouted"
            ) from exc
        held[owner] = share
    return sign_frame("shares", request, me, b"".join(held[o] for o in sorted(held)), identity,
                      roster.digest)
