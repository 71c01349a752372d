"""This member's noisy vector in a secure round: charged, read, noised once and stored,
through the participant's one charged-release flow (:mod:`participant.release.flow`).

The noise share is a parameter (``noise_share``) so the protocol is testable without a
particular sampler; the default is :func:`common.noise.sample_noise_share`.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from common.secagg.vector import NoiseShare, noisy_secure_vector
from common.study.config import StudyConfig
from participant import layout
from participant.agent import Agent
from participant.data.counts import empty_counts, exact_histograms
from participant.options import DataOptions
from participant.release.contribute import ReleaseSubstituted
from participant.release.flow import Charge, charged_release, or_noise_only
from participant.secagg.files import RoundFiles


def ledger_key(study: str, number: int) -> str:
    """The local ledger's idempotency key of this member's vector in round ``number``."""
    return f"secagg-{study}-{number}"


def default_noise_share(
    n: int, sensitivity: int, epsilon: Decimal, h_min: int
) -> NDArray[np.int64]:
    from common.noise import sample_noise_share

    return sample_noise_share(n, sensitivity, epsilon, h_min)


def noisy_vector(
    agent: Agent,
    study: str,
    number: int,
    config: StudyConfig,
    data: str | Path,
    options: DataOptions,
    noise_share: NoiseShare,
    files: RoundFiles,
) -> NDArray[np.int64]:
    """The stored noisy vector of this round; drawn once, after the ledger reserved it."""
    path = files.root / layout.NOISY
    if path.exists():
        stored: NDArray[np.int64] = np.load(path)
        return stored
    enrolment = agent.state.load_enrolment()
    charge = Charge(ledger_key(study, number), study, config.version, "",
                    config.release_cost(), enrolment.cap)
    # The same checks as an independent release, before the ledger reserves anything:
    # per-release ceiling, column roles, approved schema, clipping policy.
    source = agent.checked_source(study, data, options, config, enrolment, False, charge.cost)

    def make() -> tuple[NDArray[np.int64], str | None]:
        exact, substitute = or_noise_only(
            lambda: exact_histograms(source, config.lsh_family(), config.grid_spec(),
                                     dense_grid=True),
            lambda: empty_counts(config))
        return noisy_secure_vector(config, exact.lsh, exact.grid_dense, noise_share), substitute

    def detail(substitute: str | None) -> str:
        done = f"secure round {number}: noisy vector stored locally"
        return done if substitute is None else f"{done} (noise-only substitute: {substitute})"

    with agent.ledger() as ledger:
        known = ledger.entry(charge.key)
        if known is not None and known.status == "abandoned":
            ledger.check(charge.cost, enrolment.cap)
        (files.root / layout.SUBSTITUTE).unlink(missing_ok=True)  # left by a crash before noisy.npy
        noisy, _ = charged_release(ledger, charge, make=make, store=files.store_noisy,
                                   status="kept", detail=detail, known=known)
    return noisy.astype(np.int64)


def raise_if_substituted(agent: Agent, study: str, number: int, files: RoundFiles,
                         data: object) -> None:
    """After the round: raise (exit 3) when this member's vector was noise only."""
    path = files.root / layout.SUBSTITUTE
    if path.exists():
        key = ledger_key(study, number)
        with agent.ledger() as ledger:
            entry = ledger.entry(key)
        assert entry is not None
        raise ReleaseSubstituted.after(data, entry, path.read_text())
