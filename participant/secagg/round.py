"""Take part in one secure aggregation release round of a study (``fedod-participant round``).

Order of operations (each step durable before the next)::

    verify config, consortium key pinned ─► per attempt: fresh X25519 keys (stored) ─► signed
    advert, posted at once (it does not depend on the data) ─► verify roster: coordinator's
    signature, and every member certified by the consortium's membership certificate under
    the identity key the roster lists, at least max(n - D, h_min) of them (refused before
    anything is read, drawn or charged) ─► local ledger check + reserve ─► exact counts (LSH
    tables, then the dense grid if the study has one), clipped to the public max_records; if
    the data cannot be read (or has no rows) the counts are zeros: a noise-only vector goes on
    through the round exactly like any other, and the command exits 3 afterwards ─►
    noisy vector = counts + a noise share per part (common.secagg.vector), drawn ONCE, stored
    (rounds/<n>/noisy.npy; participant.secagg.vector) ─► masked frame stored, then posted at
    the fixed send slot after the roster was read (``send_slot``; retries send the same
    bytes) ─►
    unmask answer (its own self seed) only under the rules of common.secagg.participant, its
    attempt recorded (rounds/<n>/unmasked) before the answer leaves ─► only if members were lost
    after masking: the shares held of their seeds, for that same attempt only

Advert, masked and unmask travel as binary frames (common.secagg.wire,
application/octet-stream); the rare shares answer as signed JSON.

A restarted attempt (someone was lost before masking) reuses the stored noisy vector under
fresh masks.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from common.errors import ConfigError, Conflict
from common.secagg import participant as proto
from common.secagg.membership import SignedMembership
from common.secagg.messages import RoundRef, SignedMessage
from common.secagg.schemas import RoundState
from common.secagg.vector import NoiseShare
from common.secagg.wire import OCTET_STREAM
from participant.agent import Agent
from participant.client import CoordinatorClient
from participant.options import DataOptions
from participant.release import policy
from participant.secagg.checks import certified_members, check_certified_roster
from participant.secagg.files import RoundFiles, register_identity
from participant.secagg.vector import default_noise_share, noisy_vector, raise_if_substituted

Stop = Literal["keys", "masked"] | None


class RoundAbandoned(Conflict):
    """The round ended without a revealed sum (too many dropouts), or left us out."""


class RoundRejected(Conflict):
    """The revealed sum failed the coordinator's check and was not merged (exit 7; the
    release stays charged: the noise was drawn and the masked vector sent)."""


def current_round(agent: Agent, study: str) -> RoundState | None:
    with agent.client() as client:
        return _state(client, study)


def _state(
    client: CoordinatorClient,
    study: str,
    rosters: dict[str, tuple[SignedMessage, SignedMembership | None]] | None = None,
) -> RoundState | None:
    """The current attempt. With ``rosters`` (digest -> roster and membership certificate
    already read), the coordinator leaves out the last one read and both are filled in here."""
    text = client.get_round(study, next(reversed(rosters)) if rosters else None)
    if text is None:
        return None
    st = RoundState.model_validate_json(text)
    if rosters is None:
        return st
    if st.roster is not None:
        rosters[st.roster.digest()] = (st.roster, st.membership)
    elif st.roster_digest in rosters:
        roster, membership = rosters[st.roster_digest]
        st = st.model_copy(update={"roster": roster, "membership": membership})
    return st


def _post(
    client: CoordinatorClient, study: str, number: int, what: str, msg: bytes | SignedMessage
) -> None:
    if isinstance(msg, SignedMessage):
        client.post_round_message(study, number, what, msg.model_dump_json().encode())
    else:
        client.post_round_message(study, number, what, msg, OCTET_STREAM)


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
    when reading the data took longer), on the agent's injectable clock.

    ``stop_after`` ("keys" | "masked") leaves right after that message was accepted: a drill
    for a participant lost at that point of the protocol.
    """
    policy.send_schedule(0.0, send_slot, 0.0)  # validate before fetching anything
    if options.rows_per_id:
        raise ConfigError("--rows-per-id is not supported in a secure round: the noise share "
                          "is sized for one row per person. Deduplicate the file to one row "
                          "per person, or use a study with independent noise")
    with agent.state.lock(), agent.client() as client:
        config, signed = agent.fetch_config(study, client)
        params = config.aggregation
        if params is None or params.mode != "secure":
            raise ConfigError(f"study {study!r} uses independent noise: use 'contribute'")
        me = agent.state.load_enrolment()
        if me.consortium_key is None:
            certified_members(None, None, study, config, datetime.now(UTC))
        name = client.participant_name()
        identity = register_identity(agent, client)
        coordinator = agent.public_key()
        k = config.secure_modulus_bits()
        check = functools.partial(
            check_certified_roster, me=name, coordinator_key=coordinator, params=params,
            config_digest=signed.digest(), modulus_bits=k, consortium_key=me.consortium_key,
            config=config,
        )
        rounds_dir = agent.state.study_dir(study) / "rounds"
        give_up = agent.clock() + wait
        number: int | None = None
        rosters: dict[str, tuple[SignedMessage, SignedMembership | None]] = {}
        while True:
            st = _state(client, study, rosters)
            took_part = st is not None and (rounds_dir / str(st.round) / "noisy.npy").exists()
            if st is None or (number is None and not took_part
                              and st.status not in ("keys", "masking", "unmask")):
                if agent.clock() > give_up:
                    raise TimeoutError(f"no open round of {study!r} within {wait} s")
                agent.sleep(poll)
                continue
            number = number or st.round
            if st.round != number:
                raise RoundAbandoned(f"round {number} was replaced by round {st.round}")
            if st.status == "done":
                if took_part:
                    raise_if_substituted(agent, study, number,
                                         RoundFiles(rounds_dir / str(number)), data)
                return {
                    "study": study,
                    "round": st.round,
                    "attempt": st.attempt,
                    "included": name in st.expected,
                    "cohort": st.cohort,
                    "survivors": st.survivors,
                    "participant": name,
                    "coordinator": me.coordinator_url,
                }
            if st.status == "abandoned":
                raise RoundAbandoned(f"round {number} of {study!r} was abandoned: {st.detail}")
            if st.status == "rejected":
                raise RoundRejected(f"round {number} of {study!r} was rejected: {st.detail}")
            if name not in st.expected:
                raise RoundAbandoned(f"{name} is not in attempt {st.attempt} of round {number}")
            files = RoundFiles(rounds_dir / str(number))
            files.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            ref = RoundRef(study_id=study, round=number, attempt=st.attempt)
            secrets = files.secrets(st.attempt)
            advert = proto.make_advert(ref, name, identity, secrets)
            if st.status == "keys" and "advert" not in st.done:
                _post(client, study, number, "keys", advert)
                if stop_after == "keys":
                    return {"stopped_after": "keys", "round": number}
            elif st.status == "masking" and "masked" not in st.done:
                roster = check(st, advert, ref)  # certified: only now is anything read
                anchor = agent.clock()
                noisy = noisy_vector(agent, study, number, config, data, options, noise_share,
                                      files)
                make = functools.partial(
                    proto.mask_upload, roster, me=name, identity=identity, secrets=secrets,
                    noisy=noisy, unmasked_attempt=files.unmasked(),
                )
                masked = files.frame(f"attempt-{st.attempt}.masked", make)
                send_at, _ = policy.send_schedule(anchor, send_slot, agent.clock())
                if (pause := send_at - agent.clock()) > 0:
                    agent.sleep(pause)
                _post(client, study, number, "masked", masked)
                if stop_after == "masked":
                    return {"stopped_after": "masked", "round": number}
            elif st.status == "unmask" and "unmask" not in st.done:
                assert st.request is not None
                roster = check(st, advert, ref)
                answer = proto.answer_unmask(
                    st.request,
                    roster,
                    me=name,
                    identity=identity,
                    secrets=secrets,
                    coordinator_key=coordinator,
                    params=params,
                    unmasked_attempt=files.unmasked(),
                    record=files.record_unmasked,
                )
                _post(client, study, number, "unmask", answer)
            elif st.status == "recover" and "unmask" in st.done and "shares" not in st.done:
                assert st.request is not None
                shares = proto.answer_recover(
                    st.request, check(st, advert, ref), me=name, identity=identity,
                    secrets=secrets, inbox=st.inbox, coordinator_key=coordinator,
                    unmasked_attempt=files.unmasked(),
                )
                _post(client, study, number, "shares", shares)
            else:
                agent.sleep(poll)
