"""A secure round's roster checked against the consortium's membership certificate, before
the participant reads any data (``participant.secagg.round`` calls these)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from common.errors import ConfigError
from common.secagg import participant as proto
from common.secagg.beacon import verify_beacon
from common.secagg.draws import check_gap, verify_draw
from common.secagg.membership import MembershipBody, SignedMembership, verify_membership
from common.secagg.messages import RoundRef, RoundRefused, raw_ed25519
from common.secagg.schemas import RoundState
from common.study.config import StudyConfig

__all__ = ["certified_members", "check_certified_roster", "check_own_draw"]


def certified_members(
    membership: SignedMembership | None, consortium_key: str | None, study: str,
    config: StudyConfig, now: datetime, floor: int = 0,
) -> MembershipBody:
    """The consortium's membership certificate verified under the pinned key; refused
    (before anything is read, drawn or charged) without a pinned key or a certificate, and
    when its version is below ``floor`` (the highest version this member verified): once a
    member has seen a rotation, the rotated-out key stops at once for it."""
    if consortium_key is None:
        raise ConfigError(
            "no consortium key is pinned: secure rounds run only with members certified by "
            "your consortium's data-protection officer. Get its public key and run "
            "'fedod-participant enrol ... --consortium-key KEY' again; nothing was read")
    if membership is None:
        raise RoundRefused(
            f"the coordinator sent no membership certificate for {study!r}: refusing a roster "
            "no consortium certified; nothing was read, drawn or charged")
    assert config.aggregation is not None
    body = verify_membership(membership, raw_ed25519(consortium_key), study=study,
                             params=config.aggregation, now=now)
    if body.version < floor:
        raise RoundRefused(
            f"membership certificate v{body.version} is older than v{floor}, which this "
            f"member already verified for {study!r}: a replayed certificate could bring back "
            "a revoked key; refused before anything was read")
    return body


def check_own_draw(st: RoundState, ref: RoundRef, me: str, key: str, last: int | None
                   ) -> None:
    """The member's own draw statement (common.secagg.draws) verified under the pinned
    consortium key ``key``; with ``last`` (``c_last``, when it is about to mask), a draw
    more than :data:`~common.secagg.draws.BEACON_DRAWS` after it is refused."""
    assert st.roster is not None
    if st.draw is None:
        raise RoundRefused(
            f"the coordinator served no beacon draw count for {me} in {ref.round_id}: this "
            "study's masking releases are charged per draw; nothing was read or sent")
    verify_draw(ref, st.roster.digest(), me, st.draw.count, st.draw.signature,
                raw_ed25519(key))
    if last is not None:
        check_gap(st.draw.count, last, ref, me)


def check_certified_roster(
    st: RoundState, advert: bytes, ref: RoundRef, *, me: str, consortium_key: str | None,
    config: StudyConfig, last_draw: int | None = None,
    certificate_floor: int = 0, **fixed: Any
) -> proto.VerifiedRoster:
    """The roster of ``st`` checked by :func:`common.secagg.participant.check_roster`
    against the membership certificate served with it, and in a study whose masking graph
    needs the consortium's beacon, its beacon signature under the pinned consortium key
    (:func:`common.secagg.beacon.verify_beacon`: missing, invalid or above the attempt cap is
    refused before anything is read) and the member's own draw count (:func:`check_own_draw`,
    ``last_draw``: ``c_last`` when it is about to mask); ``certificate_floor``: the highest
    certificate version this member verified (:func:`certified_members`)."""
    assert st.roster is not None and config.aggregation is not None
    certified = certified_members(st.membership, consortium_key, ref.study_id, config,
                                  datetime.now(UTC), certificate_floor)
    beacon = None
    if config.aggregation.needs_beacon:
        assert consortium_key is not None  # certified_members refused without one
        beacon = verify_beacon(st.beacon, ref, st.roster.digest(), raw_ed25519(consortium_key))
        check_own_draw(st, ref, me, consortium_key, last_draw)
    return proto.check_roster(st.roster, my_advert=advert, ref=ref,
                              identities=certified.members, adverts=st.adverts, beacon=beacon,
                              me=me, **fixed)
