"""A coordinator that invents members, and a secure round's transcript (docs/TRUST.md).

The participant (a real :class:`participant.agent.Agent`, driven by
:func:`participant.secagg.round.run_secure_round`) talks to a coordinator played here over
``httpx.MockTransport``; the other members are played with the pure protocol functions. Time
is an injected clock that only ``sleep`` moves: nothing depends on wall-clock timing.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx
import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from common.errors import CoordinatorUnavailable, SignatureInvalid
from common.secagg import participant as proto
from common.secagg import server
from common.secagg.messages import RosterBody, RoundRef, RoundRefused, b64d, b64e, sign_message
from common.secagg.params import AggregationParams
from common.secagg.roster import VerifiedRoster
from common.secagg.schemas import RoundState
from common.secagg.wire import WIRE
from common.study.config import FeatureSpec, PrivacyParams, new_study_config
from common.study.signing import generate_key, key_fingerprint, public_key_pem, sign_config
from participant.agent import Agent, DataOptions
from participant.cli.commands import pin_consortium_key
from participant.consortium.cli import certify, raw_key
from participant.secagg.round import run_secure_round

FEATS = [FeatureSpec(name=n, lo=0.0, hi=1.0) for n in ("a", "b", "c")]
PEERS = ("h1", "h2", "h3")
SLOT = 30.0


def _zero_share(n, sensitivity, epsilon, h_min):
    return np.zeros(n, dtype=np.int64)


class Clock:
    """Time moves only when the participant sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)


class RoundCoordinator:
    """A coordinator running one secure round with the victim ``h0`` and three peers.

    ``invent``: the coordinator fills the roster with identities of its own (valid adverts
    signed by keys it made) under the peers' names, instead of the certified peers."""

    def __init__(self, clock: Clock, *, invent: bool = False) -> None:
        self.key, self.clock, self.invent = generate_key(), clock, invent
        params = AggregationParams(mode="secure", cohort_size=4, max_dropouts=0,
                                   max_colluders=1)
        self.config = new_study_config("s1", FEATS, privacy=PrivacyParams(epsilon_lsh="1"),
                                       n_tables=4, aggregation=params)
        self.signed = sign_config(self.config, self.key)
        self.ref = RoundRef(study_id="s1", round=1, attempt=1)
        self.consortium = Ed25519PrivateKey.generate()
        self.peers = {n: Ed25519PrivateKey.generate() for n in PEERS}
        self.fakes = {n: Ed25519PrivateKey.generate() for n in PEERS}
        self.secrets = {n: proto.RoundSecrets.generate() for n in PEERS}
        self.victim_key: Ed25519PublicKey | None = None
        self.status, self.roster, self.request = "keys", None, None
        self.done: list[str] = []
        self.masked: dict[str, bytes] = {}
        self.adverts: dict[str, bytes] = {}
        self.transcript: list[tuple[str, str, float]] = []

    def certify(self) -> dict:
        members = {n: raw_key(k.public_key()) for n, k in self.peers.items()}
        assert self.victim_key is not None
        members["h0"] = raw_key(self.victim_key)
        return certify("s1", self.config.aggregation, members, self.consortium,
                       expires_at=datetime.now(UTC) + timedelta(days=1)).model_dump()

    def _identity(self, name: str) -> Ed25519PrivateKey:
        return (self.fakes if self.invent else self.peers)[name]

    def _advert(self, name: str) -> bytes:
        return proto.make_advert(self.ref, name, self._identity(name), self.secrets[name])

    def _state(self) -> str:
        from common.secagg.membership import SignedMembership

        now = datetime(2026, 11, 28, tzinfo=UTC)
        st = RoundState(
            study_id="s1", round=1, attempt=1, status=self.status,
            expected=["h0", *PEERS], cohort=4 if self.roster else 0, masked=len(self.masked),
            survivors=0, created_at=now, finished_at=None, roster=self.roster,
            roster_digest=self.roster.digest() if self.roster else None,
            membership=SignedMembership(**self.certify()) if self.roster else None,
            request=self.request, done=self.done,
            adverts=self._served(server.neighbour_adverts, self.adverts),
            acks=self._served(server.neighbour_acks, self.masked), wire=WIRE,
        )
        return st.model_dump_json()

    def _identities(self) -> dict[str, str]:
        assert self.victim_key is not None
        keys = {n: raw_key(self._identity(n).public_key()) for n in PEERS}
        return {**keys, "h0": raw_key(self.victim_key)}

    def _served(self, pack, items: dict[str, bytes]) -> str:
        """What the coordinator serves h0 beside the roster: its neighbours' items, packed."""
        if not items:
            return ""
        roster = server.roster_of(self.roster, self.key.public_key(), self.adverts,
                                  self._identities())
        return pack(roster, "h0", items)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.transcript.append((request.method, path, self.clock.now))
        if path == "/v1/key":
            return httpx.Response(200, json={"key_id": key_fingerprint(self.key),
                                             "public_key_pem": public_key_pem(self.key)})
        if path.endswith("/config"):
            return httpx.Response(200, text=self.signed.model_dump_json())
        if path == "/v1/me":
            return httpx.Response(200, json={
                "participant": "h0", "epsilon_cap": "10", "delta_cap": "0",
                "epsilon_remaining": "10", "delta_remaining": "0", "epsilon_spent": "0",
                "delta_spent": "0"})
        if path == "/v1/me/identity-key":
            raw = b64d(json.loads(request.content)["public_key"], size=32)
            self.victim_key = Ed25519PublicKey.from_public_bytes(raw)
            return httpx.Response(201, json={"public_key": b64e(raw)})
        if path.endswith("/rounds/current"):
            return httpx.Response(200, text=self._state())
        if path.endswith("/keys"):
            self.adverts = {n: self._advert(n) for n in PEERS}
            self.adverts["h0"] = request.content
            self.roster = server.build_roster(
                self.ref, self.adverts, universe=["h0", *PEERS],
                config_digest=self.signed.digest(),
                modulus_bits=self.config.secure_modulus_bits(),
                threshold=self.config.aggregation.threshold, key=self.key,
                degree=self.config.aggregation.degree)
            self.status, self.done = "masking", ["advert"]
            return httpx.Response(200, json={})
        if path.endswith("/masked"):
            roster = server.roster_of(self.roster, self.key.public_key(), self.adverts,
                                      self._identities())
            self.masked = {"h0": request.content}
            for n in PEERS:
                self.masked[n] = proto.mask_upload(
                    roster, me=n, identity=self.peers[n], secrets=self.secrets[n],
                    noisy=np.zeros(self.config.secure_cells, dtype=np.int64))
            self.request = server.build_request(roster, len(roster.names), self.key)
            self.status, self.done = "unmask", ["advert", "masked"]
            return httpx.Response(200, json={})
        if path.endswith("/unmask"):
            self.status, self.done = "done", ["advert", "masked", "unmask"]
            return httpx.Response(200, json={})
        return httpx.Response(404, json={"detail": f"unexpected {path}"})


def _agent(coord: RoundCoordinator, clock: Clock, tmp_path, handler=None) -> Agent:
    agent = Agent(tmp_path / "state", transport=httpx.MockTransport(handler or coord),
                  sleep=clock.sleep, clock=clock, max_tries=2)
    agent.enrol("http://coord.test", "tok", key_fingerprint(coord.key), epsilon_cap="10")
    pin_consortium_key(agent, raw_key(coord.consortium.public_key()))
    return agent


def _data(tmp_path, rows: int):
    path = tmp_path / f"d{rows}.csv"
    X = np.random.default_rng(rows).uniform(0, 1, size=(rows, 3))
    np.savetxt(path, X, delimiter=",", header="a,b,c", comments="")
    return path


def test_a_coordinator_inventing_members_is_refused_before_data_is_read(tmp_path):
    """Valid adverts, signed by identity keys the coordinator made, under the certified
    peers' names: refused at the roster, before the ledger reserves or the data is read."""
    clock = Clock()
    coord = RoundCoordinator(clock, invent=True)
    agent = _agent(coord, clock, tmp_path)
    with pytest.raises(SignatureInvalid, match="signature does not verify"):
        run_secure_round(agent, "s1", _data(tmp_path, 200), DataOptions(),
                         noise_share=_zero_share, send_slot=SLOT)
    assert not list((tmp_path / "state").rglob("noisy.npy"))
    with agent.ledger() as ledger:
        assert ledger.entries() == []
    assert not any(path.endswith("/masked") for _, path, _ in coord.transcript)


def test_a_secure_round_without_a_pinned_consortium_key_is_refused(tmp_path):
    clock = Clock()
    coord = RoundCoordinator(clock)
    agent = Agent(tmp_path / "state", transport=httpx.MockTransport(coord), sleep=clock.sleep,
                  clock=clock, max_tries=2)
    agent.enrol("http://coord.test", "tok", key_fingerprint(coord.key), epsilon_cap="10")
    with pytest.raises(Exception, match="no consortium key is pinned"):
        run_secure_round(agent, "s1", _data(tmp_path, 200), DataOptions(),
                         noise_share=_zero_share, send_slot=SLOT)
    assert not any(path.endswith("/keys") for _, path, _ in coord.transcript)


def _transcript(tmp_path, rows: int) -> list[tuple[str, str, float]]:
    clock = Clock()
    coord = RoundCoordinator(clock)
    agent = _agent(coord, clock, tmp_path / str(rows))
    doc = run_secure_round(agent, "s1", _data(tmp_path, rows), DataOptions(),
                           noise_share=_zero_share, send_slot=SLOT, poll=1.0)
    assert doc["included"] and (tmp_path / str(rows)).exists()
    start = coord.transcript[0][2]
    return [(method, path, t - start) for method, path, t in coord.transcript]


def test_the_round_transcript_does_not_depend_on_the_row_count(tmp_path):
    """Which requests, in which order, at which time on the participant's clock: the same for
    200 rows and 20,000 rows; the masked frame leaves exactly one send slot after the roster
    was read, and the advert before any data is read."""
    small, large = _transcript(tmp_path, 200), _transcript(tmp_path, 20_000)
    assert small == large
    paths = [p for _, p, _ in small]
    keys, masked = paths.index("/v1/studies/s1/rounds/1/keys"), paths.index(
        "/v1/studies/s1/rounds/1/masked")
    roster_read = max(i for i, p in enumerate(paths[:masked]) if p.endswith("/current"))
    assert keys < roster_read < masked
    assert small[masked][2] - small[roster_read][2] == SLOT


class Busy:
    """The coordinator answers 503 to every request from the ``after``-th on, ``length``
    requests long (``None``: for good); the requests it drops never reach it."""

    def __init__(self, coord: RoundCoordinator, after: int, length: int | None) -> None:
        self.coord, self.after, self.length, self.seen, self.refused = coord, after, length, 0, 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen += 1
        if self.seen > self.after and (self.length is None or self.refused < self.length):
            self.refused += 1
            self.coord.clock.sleep(30.0)  # the client's timeout, on the injected clock
            return httpx.Response(503, headers={"Retry-After": "5"}, json={"detail": "busy"})
        return self.coord(request)


@pytest.mark.parametrize("after", [2, 4, 6, 7, 9, 11])
def test_a_member_waits_out_a_busy_coordinator_at_any_step(tmp_path, after):
    """Twelve refused requests in a row (the client's ``max_tries`` is two), wherever they
    fall (the config, the identity key, a state read, the advert, the masked frame or the
    unmask answer): the member waits them out and finishes, each message sent once."""
    clock = Clock()
    coord = RoundCoordinator(clock)
    busy = Busy(coord, after, 12)
    agent = _agent(coord, clock, tmp_path, busy)
    doc = run_secure_round(agent, "s1", _data(tmp_path, 200), DataOptions(),
                           noise_share=_zero_share, send_slot=SLOT, wait=600.0)
    assert doc["included"] and busy.refused == 12
    posted = [p.rsplit("/", 1)[1] for m, p, _ in coord.transcript if m == "POST"]
    assert [p for p in posted if p in ("keys", "masked", "unmask")] == [
        "keys", "masked", "unmask"]


def test_a_member_gives_up_after_wait_seconds_without_an_answer(tmp_path):
    clock = Clock()
    coord = RoundCoordinator(clock)
    busy = Busy(coord, 8, None)
    agent = _agent(coord, clock, tmp_path, busy)
    start = clock.now
    with pytest.raises(CoordinatorUnavailable):
        run_secure_round(agent, "s1", _data(tmp_path, 200), DataOptions(),
                         noise_share=_zero_share, send_slot=SLOT, wait=300.0)
    assert 300.0 < clock.now - start < 600.0


class SplitViewCoordinator(RoundCoordinator):
    """``how = "digest"``: the roster's advert digest is ground (a free value, not the
    digest of the adverts); ``how = "peers"``: h0 gets the true roster, but the peers masked
    under another roster of the same attempt (a split view)."""

    def __init__(self, clock: Clock, how: str) -> None:
        super().__init__(clock)
        self.how = how

    def _served(self, pack, items: dict[str, bytes]) -> str:
        """As the coordinator serves them, with the ground digest not checked."""
        if not items:
            return ""
        body = RosterBody.model_validate_json(self.roster.payload)
        names = sorted(self.adverts)
        return pack(VerifiedRoster(body, self.roster.digest(), names, {}), "h0", items)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        response = super().__call__(request)
        path = request.url.path
        if path.endswith("/keys") and self.how == "digest":
            body = RosterBody.model_validate_json(self.roster.payload)
            self.roster = sign_message("roster", body.model_copy(
                update={"adverts_digest": "ee" * 32}), self.key)
        if path.endswith("/masked") and self.how == "peers":
            true = server.roster_of(self.roster, self.key.public_key(), self.adverts,
                                    self._identities())
            other = VerifiedRoster(true.body, "ee" * 32, true.names, true.members)
            for n in PEERS:
                self.masked[n] = proto.mask_upload(
                    other, me=n, identity=self.peers[n], secrets=self.secrets[n],
                    noisy=np.zeros(self.config.secure_cells, dtype=np.int64))
        return response


@pytest.mark.parametrize(("how", "match", "masked"), [
    ("digest", "advert digest is not the digest of the adverts", False),
    ("peers", "did not acknowledge the roster", True),
])
def test_a_split_view_is_refused_by_the_real_agent(tmp_path, how, match, masked):
    """The real agent against a coordinator that grinds the roster's advert digest (refused
    before any data is read) or shows the peers another roster (the acknowledgements do not
    check: no unmask answer leaves, so the vector it masked is never unmasked)."""
    clock = Clock()
    coord = SplitViewCoordinator(clock, how)
    agent = _agent(coord, clock, tmp_path)
    with pytest.raises(RoundRefused, match=match):
        run_secure_round(agent, "s1", _data(tmp_path, 200), DataOptions(),
                         noise_share=_zero_share, send_slot=SLOT)
    paths = [path for _, path, _ in coord.transcript]
    assert any(path.endswith("/masked") for path in paths) == masked
    assert not any(path.endswith("/unmask") for path in paths)
    assert bool(list((tmp_path / "state").rglob("noisy.npy"))) == masked
