"""In-memory cohort for the pure secure-aggregation tests (no network, no database)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.secagg import participant as p
from common.secagg import server as s
from common.secagg.answers import answer_recover, answer_unmask
from common.secagg.messages import RoundRef, SignedMessage, b64e
from common.secagg.params import AggregationParams

DIGEST = "ab" * 32


@dataclass
class Member:
    name: str
    identity: Ed25519PrivateKey
    secrets: p.RoundSecrets
    advert: bytes
    unmasked: int | None = None
    masked: int | None = None
    roster: p.VerifiedRoster | None = None


@dataclass
class Cohort:
    params: AggregationParams
    ref: RoundRef
    k: int
    coordinator: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)
    members: dict[str, Member] = field(default_factory=dict)
    roster: SignedMessage | None = None
    uploads: dict[str, bytes] = field(default_factory=dict)
    beacon: bytes | None = None  # a beacon study's verified signature (common.secagg.beacon)

    @classmethod
    def make(cls, n: int, *, max_dropouts: int = 0, max_colluders: int = 1, k: int = 32, attempt=1):
        params = AggregationParams(
            mode="secure", cohort_size=n, max_dropouts=max_dropouts, max_colluders=max_colluders
        )
        ref = RoundRef(study_id="s1", round=1, attempt=attempt)
        cohort = cls(params, ref, k)
        for i in range(n):
            cohort.add(f"h{i:02d}")
        return cohort

    def add(self, name: str) -> Member:
        old = self.members.get(name)  # identity keys are long-term: kept across attempts
        identity = old.identity if old else Ed25519PrivateKey.generate()
        secrets = p.RoundSecrets.generate()
        member = Member(name, identity, secrets, p.make_advert(self.ref, name, identity, secrets))
        self.members[name] = member
        return member

    def publish(self, names=None) -> SignedMessage:
        names = sorted(self.members) if names is None else names
        self.roster = s.build_roster(
            self.ref,
            {n: self.members[n].advert for n in names},
            universe=sorted(self.members),
            config_digest=DIGEST,
            modulus_bits=self.k,
            threshold=self.params.threshold,
            key=self.coordinator,
            degree=self.params.degree,
        )
        return self.roster

    def check(self, name: str, roster: SignedMessage | None = None) -> p.VerifiedRoster:
        m = self.members[name]
        m.roster = p.check_roster(
            roster or self.roster,
            me=name,
            my_advert=m.advert,
            coordinator_key=self.coordinator.public_key(),
            ref=self.ref,
            params=self.params,
            config_digest=DIGEST,
            modulus_bits=self.k,
            identities=self.identities(),
            adverts=self.served(name, roster or self.roster),
            beacon=self.beacon,
        )
        return m.roster

    def served(self, name: str, roster: SignedMessage) -> str:
        """What the coordinator serves ``name`` beside the roster: its neighbours' adverts
        (nothing for a roster too large for the study: it has no graph, and check_roster
        refuses its size before it looks for one)."""
        frames = {n: x.advert for n, x in self.members.items()}
        try:
            sroster = s.roster_of(roster, self.coordinator.public_key(), frames,
                                  self.identities())
            sroster = dataclasses.replace(sroster, beacon=self.beacon)
            return s.neighbour_adverts(sroster, name, frames)
        except (ValueError, KeyError):
            return ""

    def identities(self) -> dict[str, str]:
        return {n: b64e(p.raw_public(m.identity)) for n, m in self.members.items()}

    def mask(self, name: str, noisy) -> bytes:
        m = self.members[name]
        roster = m.roster or self.check(name)
        frame = p.mask_upload(
            roster, me=name, identity=m.identity, secrets=m.secrets, noisy=np.asarray(noisy)
        )
        m.masked = roster.body.attempt
        return frame

    def server_roster(self) -> p.VerifiedRoster:
        roster = s.roster_of(self.roster, self.coordinator.public_key(),
                             {n: m.advert for n, m in self.members.items()}, self.identities())
        return dataclasses.replace(roster, beacon=self.beacon)

    def accept(self, uploads: dict[str, bytes], n_cells: int):
        """name -> the masked words the coordinator accepted (the frames are kept)."""
        roster = self.server_roster()
        self.uploads, self.n_cells = dict(uploads), n_cells
        return {
            name: s.accept_masked(
                up, roster, name=name, identity=self.members[name].identity.public_key(),
                n_cells=n_cells,
            )
            for name, up in uploads.items()
        }

    def request(self, included) -> SignedMessage:
        return s.build_request(self.server_roster(), len(included), self.coordinator)

    def answer(self, name: str, request: SignedMessage, accepted=None, acks=None) -> bytes:
        m = self.members[name]

        def record(attempt: int) -> None:
            m.unmasked = attempt

        return answer_unmask(
            request, m.roster or self.check(name), me=name, identity=m.identity,
            secrets=m.secrets, coordinator_key=self.coordinator.public_key(),
            acks=s.neighbour_acks(self.server_roster(), name, self.uploads)
            if acks is None else acks,
            params=self.params, unmasked_attempt=m.unmasked, masked_attempt=m.masked,
            record=record,
        )

    def inbox(self, holder: str) -> dict[str, str]:
        """What the coordinator forwards to ``holder`` in the recover phase."""
        roster = self.server_roster()
        return {
            o: b64e(s.sealed_share(f, roster, owner=o, holder=holder, n_cells=self.n_cells))
            for o, f in self.uploads.items() if o in roster.holders(holder)
        }

    def recover(self, name: str, request: SignedMessage, inbox=None) -> SignedMessage:
        m = self.members[name]
        return answer_recover(
            request, m.roster or self.check(name), me=name, identity=m.identity,
            secrets=m.secrets, inbox=self.inbox(name) if inbox is None else inbox,
            coordinator_key=self.coordinator.public_key(), unmasked_attempt=m.unmasked,
            masked_attempt=m.masked,
        )

    def run(self, vectors: dict[str, np.ndarray], responders=None) -> np.ndarray:
        """Full round; ``responders`` (default all) answer the unmask request."""
        self.publish()
        n_cells = len(next(iter(vectors.values())))
        accepted = self.accept({n: self.mask(n, v) for n, v in vectors.items()}, n_cells)
        request = self.request(accepted)
        roster = self.server_roster()
        names = responders if responders is not None else sorted(vectors)
        seeds = {
            name: s.accept_unmask(self.answer(name, request), roster, name=name,
                                  commitment=self.commitment(name),
                                  identity=self.members[name].identity.public_key())
            for name in names
        }
        missing = [n for n in roster.names if n not in seeds]
        shares = {}
        if missing:
            recover = s.build_recover(roster, missing, self.coordinator)
            shares = {
                name: s.accept_shares(self.recover(name, recover), roster, name=name,
                                      identity=self.members[name].identity.public_key(),
                                      missing=missing)
                for name in s.helpers(roster, set(names), missing)
            }
        return s.reveal_sum(roster, accepted, seeds, shares,
                            {n: self.commitment(n) for n in self.uploads})

    def commitment(self, name: str) -> bytes:
        """The seed commitment in ``name``'s accepted masked frame."""
        return s.commitment_of(self.uploads[name], self.server_roster(), self.n_cells)


def max_log_ratio(a: np.ndarray, b: np.ndarray, min_count: int = 400) -> tuple[float, float]:
    """Largest |log P_a(v)/P_b(v)| over values seen >= min_count times in both, and its
    5-sigma statistical allowance."""
    lo, hi = min(a.min(), b.min()), max(a.max(), b.max())
    ca = np.bincount(a - lo, minlength=hi - lo + 1)
    cb = np.bincount(b - lo, minlength=hi - lo + 1)
    ok = (ca >= min_count) & (cb >= min_count)
    assert ok.sum() >= 3
    ratios = np.abs(np.log(ca[ok] / cb[ok]))
    slack = 5 * np.sqrt(1 / ca[ok] + 1 / cb[ok])
    worst = int(np.argmax(ratios - slack))
    return float(ratios[worst]), float(slack[worst])
