"""A participant's durable secure-aggregation files: its long-term identity key and, per round,
the stored noisy vector, each attempt's secrets, the messages it sent and the attempt it
helped unmask (``participant.secagg.round`` drives the protocol with them)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from numpy.typing import NDArray

from common.secagg.identity import sign_identity_proof
from common.secagg.keys import RoundSecrets, raw_public
from common.secagg.messages import b64e
from common.study.signing import load_private_key, save_private_key
from participant import layout
from participant.agent import Agent
from participant.client import CoordinatorClient
from participant.state import write_private


@dataclass
class RoundFiles:
    """rounds/<number>/ in the study's state directory (0700 dir, 0600 files)."""

    root: Path

    @property
    def study_dir(self) -> Path:
        """The study's directory (``root`` is its ``rounds/<number>``): the draw counter's."""
        return self.root.parent.parent

    def secrets(self, attempt: int) -> RoundSecrets:
        path = layout.attempt_file(self.root, attempt, "keys")
        if not path.exists():
            write_private(path, RoundSecrets.generate().to_bytes())
        return RoundSecrets.from_bytes(path.read_bytes())

    def unmasked(self) -> int | None:
        path = self.root / layout.UNMASKED
        return int(path.read_text()) if path.exists() else None

    def masked_attempt(self) -> int | None:
        """The last attempt of the round this participant masked (its stored frames)."""
        done = layout.masked_attempts(self.root)
        return max(done) if done else None

    def masked_roster(self, attempt: int) -> str | None:
        """The digest of the roster this participant masked under in ``attempt``."""
        path = layout.attempt_file(self.root, attempt, "roster")
        return path.read_text() if path.exists() else None

    def masked_frame(self, attempt: int, roster_digest: str, make: Callable[[], bytes],
                     draw: int | None = None) -> bytes:
        """The attempt's stored masked frame, made first if absent, with the digest of the
        roster it was made under stored (fsync) before the frame, and in a beacon study the
        draw count it masks under (``draw``, :func:`record_draw`)."""
        def made() -> bytes:
            if draw is not None:
                record_draw(self.study_dir, draw)
            write_private(layout.attempt_file(self.root, attempt, "roster"),
                          roster_digest.encode())
            return make()
        return self.frame(layout.attempt_file(self.root, attempt, "masked"), made)

    def record_unmasked(self, attempt: int) -> None:
        write_private(self.root / layout.UNMASKED, str(attempt).encode())

    def store_noisy(self, noisy: NDArray[np.int64], substitute: str | None) -> None:
        """Store the noisy vector (fsync) as ``noisy.npy``, and the local-only reason
        beside it (``substitute.txt``) when it is noise only; a restart reuses it."""
        if substitute is not None:  # local only: stays on this machine
            write_private(self.root / layout.SUBSTITUTE, substitute.encode())
        tmp = self.root / layout.NOISY_TMP
        np.save(tmp, noisy.astype(np.int64))
        write_private(self.root / layout.NOISY, tmp.read_bytes())
        tmp.unlink()

    def frame(self, path: Path, make: Callable[[], bytes]) -> bytes:
        """A stored frame, made and stored (fsync) first if absent: retries resend it."""
        if not path.exists():
            write_private(path, make())
        return path.read_bytes()




def last_draw(study_dir: Path) -> int:
    """``c_last``: the draw count this member last masked under in the study (0 at first)."""
    path = study_dir / layout.BEACON_DRAW
    return int(path.read_text()) if path.exists() else 0


def record_draw(study_dir: Path, count: int) -> None:
    """Store (fsync) ``count`` as ``c_last`` before the masked frame is made; never lowered."""
    write_private(study_dir / layout.BEACON_DRAW, str(max(count, last_draw(study_dir))).encode())


def certificate_floor(study_dir: Path) -> int:
    """The highest certificate version this member verified in the study (0 before the
    first): a lower one is refused (a replayed certificate would bring back a rotated-out
    key)."""
    path = study_dir / layout.MEMBERSHIP_VERSION
    return int(path.read_text()) if path.exists() else 0


def record_certificate(study_dir: Path, version: int) -> None:
    """Store (fsync) a verified certificate's version; never lowered."""
    if version > certificate_floor(study_dir):
        write_private(study_dir / layout.MEMBERSHIP_VERSION, str(version).encode())


def identity_key(agent: Agent) -> Ed25519PrivateKey:
    """The participant's long-term Ed25519 identity key (created once, 0600)."""
    path = agent.state.identity_key_path
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        save_private_key(Ed25519PrivateKey.generate(), tmp)
        tmp.replace(path)
    return load_private_key(path)


def register_identity(agent: Agent, client: CoordinatorClient) -> Ed25519PrivateKey:
    """Register the identity key with a proof of possession bound to this participant's name
    (as the coordinator knows it) and the pinned coordinator key."""
    key = identity_key(agent)
    name = client.participant_name()
    proof = sign_identity_proof(key, agent.state.load_enrolment().key_fingerprint, name)
    body = json.dumps({"public_key": b64e(raw_public(key)), "proof": proof}).encode()
    client.register_identity_key(body)
    return key


def ensure_identity(agent: Agent) -> None:
    """Register the long-term identity key (idempotent: the same key again is a no-op)."""
    with agent.client() as client:
        register_identity(agent, client)


def rounds_taken(agent: Agent, study: str) -> set[int]:
    """Rounds of ``study`` for which this participant stored a noisy vector."""
    return layout.rounds_with_noisy(agent.state.study_dir(study))
