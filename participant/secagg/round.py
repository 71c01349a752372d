"""Take part in one secure aggregation release round of a study (``fedod-participant round``).

Order of operations (each step durable before the next)::

    verify config, consortium key pinned ─► per attempt: fresh X25519 keys (stored) ─► signed
    advert, posted at once (it does not depend on the data) ─► verify roster: coordinator's
    signature, and every member certified by the consortium's membership certificate under
    the identity key the roster lists, at least max(n - D, h_min) of them, and (beacon
    studies, whose sparse graph can be bad) the consortium's beacon signature over the
    roster, which seeds the masking graph, and its own signed draw count, at most G above the
    last it masked under (common.secagg.draws; refused before anything is read, drawn or
    charged) ─► local ledger check + reserve ─► exact counts (LSH
    tables, then the dense grid if the study has one), clipped to the public max_records; if
    the data cannot be read (or has no rows) the counts are zeros: a noise-only vector goes on
    through the round exactly like any other, and the command exits 3 afterwards ─►
    noisy vector = counts + a noise share per part (common.secagg.vector), drawn ONCE, stored
    (rounds/<n>/noisy.npy; participant.secagg.vector) ─► masked frame stored, then posted at
    the fixed send slot after the roster was read (``send_slot``; retries send the same
    bytes) ─►
    unmask answer (its own self seed) only under the rules of common.secagg.answers, its
    attempt recorded (rounds/<n>/unmasked) before the answer leaves ─► only if members were lost
    after masking: the shares held of their seeds, for that same attempt only

Every message travels as a binary frame (common.secagg.wire, application/octet-stream).

A restarted attempt (someone was lost before masking) reuses the stored noisy vector under
fresh masks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from common.errors import ConfigError, Conflict
from common.secagg import participant as proto
from common.secagg.answers import answer_recover, answer_unmask
from common.secagg.keys import RoundSecrets
from common.secagg.membership import SignedMembership
from common.secagg.messages import RoundRef, SignedMessage
from common.secagg.pacing import Pacing
from common.secagg.params import AggregationParams
from common.secagg.schemas import RoundState, RoundStatus
from common.secagg.vector import NoiseShare
from common.secagg.view import complete_state
from common.secagg.wire import OCTET_STREAM, WIRE
from participant import layout
from participant.agent import Agent
from participant.client import CoordinatorClient
from participant.options import DataOptions
from participant.release import policy
from participant.secagg.checks import certified_members, check_certified_roster
from participant.secagg.files import (
    RoundFiles,
    certificate_floor,
    last_draw,
    record_certificate,
    register_identity,
)
from participant.secagg.vector import default_noise_share, noisy_vector, raise_if_substituted
from participant.state import Enrolment, write_private

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from common.study.config import StudyConfig

Stop = Literal["keys", "masked"] | None


class RoundAbandoned(Conflict):
    """The round ended without a revealed sum (too many dropouts), or left us out."""


class RoundRejected(Conflict):
    """The revealed sum failed the coordinator's check and was not merged (exit 7; the
    release stays charged: the noise was drawn and the masked vector sent)."""


def no_open_round(study: str, open_rounds: str, wait: float) -> str:
    """The timeout message: who opens rounds of this study, and how."""
    who = (f"the coordinator opens round 1 itself once every member certified by the uploaded "
           f"membership certificate has registered its identity key (open_rounds=when_ready); "
           f"later rounds, and round 1 if a member is missing, the administrator opens "
           f"('fedod-coordinator rounds open {study}'; 'rounds show {study}' says who is "
           f"missing)" if open_rounds == "when_ready" else
           f"the coordinator's administrator opens rounds ('fedod-coordinator rounds open "
           f"{study}', after uploading the membership certificate with 'rounds membership'), "
           f"or a config with aggregation.open_rounds=\"when_ready\" opens round 1 by itself")
    return (f"no open round of {study!r} within {wait:g} s: {who}. Nothing was read or "
            f"charged; run the command again (or raise --wait)")


def current_round(agent: Agent, study: str) -> RoundState | None:
    with agent.client() as client:
        return _state(client, study)


@dataclass
class Held:
    """What a member already read: rosters (digest -> the roster with what comes with it:
    its neighbours' adverts, and in a beacon study the beacon signature and the member's own
    draw statement) and the membership certificate (kept in the study's state directory across
    rounds; it is verified under the pinned consortium key every time it is used)."""

    path: Path
    rosters: dict[str, dict[str, Any]] = field(default_factory=dict)

    def membership(self) -> SignedMembership | None:
        if not self.path.exists():
            return None
        return SignedMembership.model_validate_json(self.path.read_bytes())


def _state(client: CoordinatorClient, study: str, held: Held | None = None,
           **config: Any) -> RoundState | None:
    """The current attempt, with what the coordinator left out of the compact view put back
    (common.secagg.view; ``config``: config digest, word size, degree and threshold of the
    verified config). With ``held``, the
    coordinator also leaves out the last roster read and the certificate held, and they are
    filled in here."""
    certificate = held.membership() if held else None
    known = next(reversed(held.rosters)) if held and held.rosters else None
    text = client.get_round(study, known, certificate.digest() if certificate else None)
    if text is None:
        return None
    st = RoundState.model_validate_json(text)
    if held is None:  # a status read: nothing is verified
        return st.model_copy(update={"study_id": study})
    if st.wire != WIRE:
        raise ConfigError(
            f"the coordinator speaks secure-aggregation wire version {st.wire}, this "
            f"participant version {WIRE} (masks bound to the roster): upgrade the coordinator "
            "or use a participant of its version; nothing was sent or charged")
    st = complete_state(st, study=study, known_roster=known, **config)
    if st.membership is not None:
        write_private(held.path, st.membership.model_dump_json().encode())
    elif st.roster_digest is not None and certificate is not None:
        st = st.model_copy(update={"membership": certificate})
    if st.roster is not None:
        held.rosters[st.roster.digest()] = {
            "roster": st.roster, "adverts": st.adverts, "beacon": st.beacon, "draw": st.draw}
    elif st.roster_digest in held.rosters:
        st = st.model_copy(update=held.rosters[st.roster_digest])
    return st


def _seen(st: RoundState | None) -> object:
    """What a waiting member compares between reads (not the counts of others' messages,
    which change all through a phase)."""
    if st is None:
        return None
    return (st.round, st.attempt, st.status, tuple(st.done), st.roster_digest,
            st.request is not None, st.acks != "", tuple(st.inbox))


def _post(
    client: CoordinatorClient, study: str, number: int, what: str, msg: bytes | SignedMessage
) -> None:
    if isinstance(msg, SignedMessage):
        client.post_round_message(study, number, what, msg.model_dump_json().encode())
    else:
        client.post_round_message(study, number, what, msg, OCTET_STREAM)


Step = dict[str, Any] | bool
"""What a phase step returns: the command's result (leave the round), ``True`` when it sent a
message (read the state again at once) or ``False`` when it has nothing to send (wait)."""

JOINABLE = (RoundStatus.KEYS, RoundStatus.BEACON, RoundStatus.MASKING, RoundStatus.UNMASK)
"""A member that has not taken part yet joins a round in these phases only."""


@dataclass
class _Member:
    """One member's run of a secure round: what every phase step reads."""

    agent: Agent
    client: CoordinatorClient
    study: str
    data: str | Path
    options: DataOptions
    noise_share: NoiseShare
    stop_after: Stop
    send_slot: float
    config: StudyConfig
    config_digest: str
    params: AggregationParams
    me: Enrolment
    name: str
    identity: Ed25519PrivateKey
    coordinator: Any
    modulus_bits: int
    study_dir: Path

    def files(self, number: int) -> RoundFiles:
        return RoundFiles(layout.round_dir(self.study_dir, number))

    def took_part(self, number: int) -> bool:
        """Whether this member stored a noisy vector for round ``number``."""
        return (layout.round_dir(self.study_dir, number) / layout.NOISY).exists()

    def check(self, st: RoundState, advert: bytes, ref: RoundRef,
              **draw: int) -> proto.VerifiedRoster:
        """The roster certified, then the certificate's version kept (never lowered)."""
        roster = check_certified_roster(
            st, advert, ref, me=self.name, coordinator_key=self.coordinator, params=self.params,
            config_digest=self.config_digest, modulus_bits=self.modulus_bits,
            consortium_key=self.me.consortium_key, config=self.config,
            certificate_floor=certificate_floor(self.study_dir), **draw)
        assert st.membership is not None
        record_certificate(self.study_dir, st.membership.body().version)
        return roster

    def attempt(self, st: RoundState, number: int) -> _Attempt:
        """This member's files, secrets and advert for the attempt ``st`` shows (refused when
        the attempt leaves it out)."""
        if self.name not in st.expected:
            raise RoundAbandoned(f"{self.name} is not in attempt {st.attempt} of round {number}")
        files = self.files(number)
        files.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        ref = RoundRef(study_id=self.study, round=number, attempt=st.attempt)
        secrets = files.secrets(st.attempt)
        advert = proto.make_advert(ref, self.name, self.identity, secrets)
        return _Attempt(number, files, ref, secrets, advert)

    def post(self, number: int, what: str, msg: bytes | SignedMessage) -> None:
        _post(self.client, self.study, number, what, msg)


@dataclass(frozen=True)
class _Attempt:
    number: int
    files: RoundFiles
    ref: RoundRef
    secrets: RoundSecrets
    advert: bytes


def _keys(m: _Member, st: RoundState, number: int) -> Step:
    """keys: post this attempt's advert (it does not depend on the data)."""
    a = m.attempt(st, number)
    if "advert" in st.done:
        return False
    m.post(number, "keys", a.advert)
    if m.stop_after == "keys":
        return {"stopped_after": "keys", "round": number}
    return True


def _wait(m: _Member, st: RoundState, number: int) -> Step:
    """beacon, restarted: nothing to send until the coordinator moves on."""
    m.attempt(st, number)
    return False


def _masking(m: _Member, st: RoundState, number: int) -> Step:
    """masking: verify the roster, read the data, draw the noise once, send the masked frame
    at the send slot."""
    a = m.attempt(st, number)
    if "masked" in st.done:
        return False
    roster = m.check(st, a.advert, a.ref, last_draw=last_draw(a.files.study_dir))  # only now is
    # anything read: certified, and in a beacon study a draw within G of the last
    anchor = m.agent.clock()
    noisy = noisy_vector(m.agent, m.study, number, m.config, m.data, m.options, m.noise_share,
                          a.files)
    make = functools.partial(
        proto.mask_upload, roster, me=m.name, identity=m.identity, secrets=a.secrets,
        noisy=noisy, unmasked_attempt=a.files.unmasked(),
    )
    masked = a.files.masked_frame(st.attempt, roster.digest, make,
                                  st.draw.count if st.draw else None)
    send_at, _ = policy.send_schedule(anchor, m.send_slot, m.agent.clock())
    if (pause := send_at - m.agent.clock()) > 0:
        m.agent.sleep(pause)
    m.post(number, "masked", masked)
    if m.stop_after == "masked":
        return {"stopped_after": "masked", "round": number}
    return True


def _unmask(m: _Member, st: RoundState, number: int) -> Step:
    """unmask: answer with this member's self seed, under the rules of common.secagg.answers."""
    a = m.attempt(st, number)
    if "unmask" in st.done:
        return False
    assert st.request is not None
    roster = m.check(st, a.advert, a.ref)
    answer = answer_unmask(
        st.request, roster, me=m.name, identity=m.identity, secrets=a.secrets, acks=st.acks,
        coordinator_key=m.coordinator, params=m.params, unmasked_attempt=a.files.unmasked(),
        masked_attempt=a.files.masked_attempt(), record=a.files.record_unmasked,
        masked_roster=a.files.masked_roster(st.attempt),
    )
    m.post(number, "unmask", answer)
    return True


def _recover(m: _Member, st: RoundState, number: int) -> Step:
    """recover: send the shares held of the lost members' seeds (only a neighbour of a lost
    member that answered the unmask holds any)."""
    a = m.attempt(st, number)
    if "unmask" not in st.done or "shares" in st.done or not st.inbox:
        return False
    assert st.request is not None
    shares = answer_recover(
        st.request, m.check(st, a.advert, a.ref), me=m.name, identity=m.identity,
        secrets=a.secrets, inbox=st.inbox, coordinator_key=m.coordinator,
        unmasked_attempt=a.files.unmasked(), masked_attempt=a.files.masked_attempt(),
        masked_roster=a.files.masked_roster(st.attempt),
    )
    m.post(number, "shares", shares)
    return True


def _done(m: _Member, st: RoundState, number: int) -> Step:
    """done: the sum was revealed; exit 3 afterwards if this member's vector was noise only."""
    if m.took_part(number):
        raise_if_substituted(m.agent, m.study, number, m.files(number), m.data)
    return {
        "study": m.study,
        "round": st.round,
        "attempt": st.attempt,
        "included": m.name in st.expected,
        "cohort": st.cohort,
        "survivors": st.survivors,
        "participant": m.name,
        "coordinator": m.me.coordinator_url,
    }


def _abandoned(m: _Member, st: RoundState, number: int) -> Step:
    raise RoundAbandoned(f"round {number} of {m.study!r} was abandoned: {st.detail}")


def _rejected(m: _Member, st: RoundState, number: int) -> Step:
    raise RoundRejected(f"round {number} of {m.study!r} was rejected: {st.detail}")


PHASES: dict[RoundStatus, Callable[[_Member, RoundState, int], Step]] = {
    RoundStatus.KEYS: _keys,
    RoundStatus.BEACON: _wait,
    RoundStatus.MASKING: _masking,
    RoundStatus.UNMASK: _unmask,
    RoundStatus.RECOVER: _recover,
    RoundStatus.RESTARTED: _wait,
    RoundStatus.DONE: _done,
    RoundStatus.ABANDONED: _abandoned,
    RoundStatus.REJECTED: _rejected,
}
"""One step of the member per phase of the attempt it reads."""


def run_secure_round(
    agent: Agent,
    study: str,
    data: str | Path,
    options: DataOptions,
    *,
    noise_share: NoiseShare = default_noise_share,
    poll: float = 0.1,
    wait: float = 600.0,
    stop_after: Stop = None,
    send_slot: float = policy.DEFAULT_SEND_SLOT,
) -> dict[str, Any]:
    """Take part in the study's open round until its sum is revealed (or it is abandoned).

    The masked frame leaves ``send_slot`` seconds after the roster was read (the next multiple
    when reading the data took longer), on the agent's injectable clock. While it waits, the
    member re-reads the state after a pause that starts at ``max(poll, n / 1000)`` seconds
    whenever what it sees changes and doubles while it does not, up to ``max(poll, n / 25)``
    (common.secagg.pacing): a cohort of a thousand asks about 1,000 times a second right after
    a change and about 25 times a second while it waits, not 10,000.

    Each request to the coordinator keeps retrying (the same bytes) for up to ``wait``
    seconds: a coordinator busy with the whole cohort is waited out, not left.

    ``stop_after`` ("keys" | "masked") leaves right after that message was accepted: a drill
    for a participant lost at that point of the protocol.
    """
    policy.send_schedule(0.0, send_slot, 0.0)  # validate before fetching anything
    if options.rows_per_id:
        raise ConfigError("--rows-per-id is not supported in a secure round: the noise share "
                          "is sized for one row per person. Deduplicate the file to one row "
                          "per person, or use a study with independent noise")
    with agent.state.lock(), agent.client(patience=wait) as client:
        config, signed = agent.fetch_config(study, client)
        params = config.aggregation
        if params is None or params.mode != "secure":
            raise ConfigError(f"study {study!r} uses independent noise: use 'contribute'")
        pacing = Pacing.for_cohort(params.cohort_size or 0, poll)
        me = agent.state.load_enrolment()
        if me.consortium_key is None:
            certified_members(None, None, study, config, datetime.now(UTC))
        name = client.participant_name()
        m = _Member(
            agent=agent, client=client, study=study, data=data, options=options,
            noise_share=noise_share, stop_after=stop_after, send_slot=send_slot, config=config,
            config_digest=signed.digest(), params=params, me=me, name=name,
            identity=register_identity(agent, client), coordinator=agent.public_key(),
            modulus_bits=config.secure_modulus_bits(), study_dir=agent.state.study_dir(study),
        )
        give_up = agent.clock() + wait
        number: int | None = None
        held = Held(agent.state.membership_path(study))
        while True:
            st = _state(client, study, held, config_digest=m.config_digest,
                        modulus_bits=m.modulus_bits, degree=params.degree,
                        threshold=params.threshold)
            if st is None or (number is None and not m.took_part(st.round)
                              and st.status not in JOINABLE):
                if agent.clock() > give_up:
                    raise TimeoutError(no_open_round(study, params.open_rounds, wait))
                agent.sleep(pacing.next(_seen(st)))
                continue
            number = number or st.round
            if st.round != number:
                raise RoundAbandoned(f"round {number} was replaced by round {st.round}")
            step = PHASES[st.status](m, st, number)
            if isinstance(step, dict):
                return step
            if not step:
                agent.sleep(pacing.next(_seen(st)))
