"""In-memory cohort for the pure secure-aggregation tests (no network, no database)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.secagg import participant as p
from common.secagg import server as s
from common.secagg.messages import RoundRef, SignedMessage
from common.secagg.params import AggregationParams

DIGEST = "ab" * 32


@dataclass
class Member:
    name: str
    identity: Ed25519PrivateKey
    secrets: p.RoundSecrets
    advert: SignedMessage
    unmasked: int | None = None
    roster: p.VerifiedRoster | None = None


@dataclass
class Cohort:
    params: AggregationParams
    ref: RoundRef
    k: int
    coordinator: Ed25519PrivateKey = field(default_factory=Ed25519PrivateKey.generate)
    members: dict[str, Member] = field(default_factory=dict)
    roster: SignedMessage | None = None

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
            [self.members[n].advert for n in names],
            config_digest=DIGEST,
            modulus_bits=self.k,
            threshold=self.params.threshold,
            key=self.coordinator,
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
        )
        return m.roster

    def mask(self, name: str, noisy) -> SignedMessage:
        m = self.members[name]
        roster = m.roster or self.check(name)
        return p.mask_upload(
            roster, me=name, identity=m.identity, secrets=m.secrets, noisy=np.asarray(noisy)
        )

    def server_roster(self) -> p.VerifiedRoster:
        return s.roster_of(self.roster, self.coordinator.public_key())

    def accept(self, uploads: dict[str, SignedMessage], n_cells: int):
        roster = self.server_roster()
        return {
            name: s.accept_masked(
                up, roster, name=name, identity=self.members[name].identity.public_key(),
                n_cells=n_cells,
            )
            for name, up in uploads.items()
        }

    def request(self, included) -> SignedMessage:
        return s.build_request(self.server_roster(), list(included), self.coordinator)

    def answer(self, name: str, request: SignedMessage, accepted) -> SignedMessage:
        m = self.members[name]
        inbox = {o: body.shares[name] for o, (body, _) in accepted.items() if o != name}

        def record(attempt: int) -> None:
            m.unmasked = attempt

        return p.answer_unmask(
            request, m.roster or self.check(name), me=name, identity=m.identity,
            secrets=m.secrets, inbox=inbox, coordinator_key=self.coordinator.public_key(),
            params=self.params, unmasked_attempt=m.unmasked, record=record,
        )

    def run(self, vectors: dict[str, np.ndarray], responders=None) -> np.ndarray:
        """Full round; ``responders`` (default all) answer the unmask request."""
        self.publish()
        n_cells = len(next(iter(vectors.values())))
        accepted = self.accept({n: self.mask(n, v) for n, v in vectors.items()}, n_cells)
        request = self.request(accepted)
        roster = self.server_roster()
        answers = {}
        for name in responders if responders is not None else sorted(vectors):
            answers[name] = s.accept_unmask(
                self.answer(name, request, accepted), roster, name=name,
                identity=self.members[name].identity.public_key(),
            )
        return s.reveal_sum(roster, {n: w for n, (_, w) in accepted.items()}, answers)
