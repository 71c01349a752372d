"""Build, record, store and send one release; re-send a stored one after a failure.

Order of operations (each step durable before the next starts)::

    checks that read no record (config, ceiling, cap, approved schema, column names)
    ─► reserve in ledger (cap re-checked; from here on the release is charged, never refunded)
    ─► read the data, exact histograms (chunked, local) ─► draw noise once ─► encode
    ─► write body to outbox/<key>.json (fsync) ─► ledger: stored
    ─► wait for the send slot ─► POST (retries send these same bytes) ─► ledger: acknowledged

**One malformed row is one dropped record**: a row with an empty, NA, NaN,
non-numeric or infinite feature value (or a CSV line with the wrong number of fields) is
dropped and counted locally (:attr:`participant.data.reader.DataReport.malformed`, never sent), so
it moves the release by at most what removing one record may.

**Nothing after the reservation may fail because of the data** (docs/TRUST.md): if reading the
file (unreadable, a missing column: nothing one row can cause), counting or drawing the
noise raises, the release goes out anyway with *noise-only* counts (the histograms of an
empty dataset), under the same key and at the same time, and the error is reported locally
only. Whether and when a POST arrives therefore does not depend on
the records; the ledger keeps the charge in every case. If even the noise-only release fails
(a config the code cannot release, independent of the data) or the agent dies, the release
is marked ``abandoned`` and stays charged. A temporary body left by a failed write is
shredded (:func:`participant.state.shred`); no noisy body is written outside the outbox.

The steps from the reservation to ``stored`` are the one charged-release flow of every kind
of release (:func:`participant.release.flow.charged_release`). If the agent dies anywhere
after the body is stored, the next ``contribute`` re-sends that body byte for byte under the
same idempotency key before doing anything else, and draws no new noise; the coordinator
answers a replay with the original contribution.

**Sensitivity with a per-key row cap.** With ``rows_per_id = N`` one person adds at most
``N`` rows, so the LSH vector has L1 sensitivity ``m * N`` and a dense grid ``N``; the noise
scale is ``sensitivity / epsilon`` with the config's epsilon, which is what is charged (per
person): the cost is computed once per release and the noised releases must add up to it.
A sparse grid is only released with ``N = 1`` (:mod:`participant.release.policy`).

Only noisy counts, the config version/digest and the claimed (epsilon, delta) leave the
machine; never row counts, clipping counts or any other statistic of the local data.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from common.budget import PrivacyBudget
from common.errors import InvalidInput
from common.noise.scale import grid_sensitivity, lsh_sensitivity
from common.secagg.params import AggregationParams
from common.study.config import StudyConfig
from common.wire.encoding import encode_release
from common.wire.schemas import ContributionCreate
from participant.client import CoordinatorClient, CoordinatorRefused
from participant.data.counts import ExactCounts, empty_counts, exact_histograms
from participant.release.flow import Charge, charged_release, or_noise_only
from participant.release.ledger import Ledger, LedgerEntry
from participant.state import StateDir, write_private

log = logging.getLogger("fedod.participant")

if TYPE_CHECKING:  # OpenDP takes ~1 s to import: only where noise is drawn, not on workers
    from common.histograms.release import Release


class ReleaseSubstituted(InvalidInput):
    """The data could not be used; a noise-only release was sent in its place (charged)."""

    @classmethod
    def after(cls, path: object, entry: LedgerEntry, reason: str) -> ReleaseSubstituted:
        return cls(
            f"{path}: the data could not be used ({reason}); a noise-only release was sent in "
            f"its place, so that whether a release arrives does not depend on the data, and "
            f"charged ({entry.cost}). Fix the file (check-data shows the problem without "
            f"sending anything) and contribute again.",
            key=entry.idempotency_key, reason=reason,
        )


@dataclass(frozen=True)
class SendResult:
    """Outcome of sending one stored release."""

    idempotency_key: str
    study: str
    contribution: dict[str, Any]
    resent: bool


@dataclass(frozen=True)
class ContributeOutcome:
    """What ``contribute`` did; everything but ``sent`` is local information only.

    ``send_slots``: how many send slots the release waited (1 when reading the data fitted
    in the slot; 0 without a slot or for a re-send).
    """

    sent: list[SendResult] = field(default_factory=list)
    clipped: dict[str, int] = field(default_factory=dict)
    spent: PrivacyBudget = field(default_factory=PrivacyBudget.zero)
    cap: PrivacyBudget = field(default_factory=PrivacyBudget.zero)
    dropped: int = 0
    send_slots: int = 0


def noisy_releases(
    config: StudyConfig, exact: ExactCounts, rows_per_id: int | None = None
) -> tuple[Release, Release | None]:
    """Draw the noise, once, scaled for ``rows_per_id`` rows per person (module docstring).
    Only called after the ledger has reserved the cost."""
    from common.histograms.release import release_grid_counts, release_lsh_counts

    p, n = config.privacy, rows_per_id or 1
    # Each cell is clipped to the public per-participant bound the coordinator checks
    # against (common.histograms.release_bounds); clipping one cell is 1-Lipschitz, so the L1
    # sensitivity stays n_tables * n (LSH) and n (grid).
    cap = (config.aggregation or AggregationParams()).max_records
    lsh = release_lsh_counts(np.minimum(exact.lsh, cap),
                             sensitivity=lsh_sensitivity(config.lsh_family().n_tables, n),
                             epsilon=p.epsilon_lsh)
    grid = None
    if exact.grid_dense is not None:
        grid = release_grid_counts(np.minimum(exact.grid_dense, cap), config.grid_cells,
                                   p.epsilon_grid, sensitivity=grid_sensitivity(n))
    elif exact.grid_cells is not None and exact.grid_counts is not None:
        grid = release_grid_counts((exact.grid_cells, np.minimum(exact.grid_counts, cap)),
                                   config.grid_cells, p.epsilon_grid, p.delta_grid,
                                   sensitivity=grid_sensitivity(n))
    return lsh, grid


def build_body(key: str, config: StudyConfig, config_digest: str, cost: PrivacyBudget,
               lsh: Release, grid: Release | None) -> bytes:
    """The exact request body; stored before sending and re-sent unchanged on retry. It
    claims ``cost``, the charge, which must be what the noise was made for."""
    made_for = lsh.cost if grid is None else lsh.cost + grid.cost
    if made_for != cost:
        raise ValueError(f"the noise was made for {made_for}, but the release is charged {cost}")
    body = ContributionCreate(
        idempotency_key=key,
        config_version=config.version,
        config_digest=config_digest,
        epsilon=cost.epsilon,
        delta=cost.delta,
        lsh=encode_release(lsh),
        grid=None if grid is None else encode_release(grid),
    )
    return body.model_dump_json().encode("utf-8")


def send_stored(
    state: StateDir, ledger: Ledger, client: CoordinatorClient, entry: LedgerEntry,
    *, resent: bool,
) -> SendResult:
    """POST the stored body of ``entry``; record the coordinator's final answer."""
    body = state.outbox_path(entry.idempotency_key).read_bytes()
    try:
        answer = client.post_contribution(entry.study, body)
    except CoordinatorRefused as exc:
        ledger.mark(entry.idempotency_key, "rejected", detail=f"HTTP {exc.status}: {exc.detail}")
        if exc.is_budget:
            raise CoordinatorRefused(
                "the coordinator refused this release: its ledger says it would pass your cap "
                "there. The noisy counts had already been drawn and sent, so your local ledger "
                f"counts the release as spent ({entry.cost}); the coordinator did not store it "
                "or charge it. Ask the coordinator's administrator to raise your cap there "
                "before the next release ('fedod-participant status' shows both ledgers).",
                status=exc.status, detail=exc.detail) from exc
        raise
    ledger.mark(entry.idempotency_key, "acknowledged", contribution_id=str(answer.get("id")))
    return SendResult(entry.idempotency_key, entry.study, answer, resent)


def recover(state: StateDir, ledger: Ledger) -> None:
    """Settle releases left by a crash (caller holds the state lock): a stored body will be
    re-sent; an unstored one is ``abandoned`` and stays charged (it may have read the data).
    Temporary files a killed write left behind are shredded."""
    state.shred_partial_writes()
    for entry in ledger.entries(status="intended"):
        stored = state.outbox_path(entry.idempotency_key).exists()
        ledger.mark(entry.idempotency_key, "stored" if stored else "abandoned",
                    detail=None if stored else "agent stopped before the body was stored")


def resend_stored(state: StateDir, ledger: Ledger, client: CoordinatorClient,
                  study: str | None = None) -> list[SendResult]:
    """Settle what a crash left (:func:`recover`), then re-send every stored body (of
    ``study``, or of every study) byte for byte, drawing nothing."""
    recover(state, ledger)
    return [send_stored(state, ledger, client, e, resent=True)
            for e in ledger.entries(study=study, status="stored")]


Counter = Callable[..., ExactCounts]


def release_body(
    charge: Charge, config: StudyConfig, source: Any, rows_per_id: int | None,
    counter: Counter | None = None,
) -> tuple[bytes, str | None]:
    """Read the data and draw the release; on any error, a noise-only release instead.

    Returns the body and, when it is a substitute, the local-only reason.
    """
    count = counter or exact_histograms

    def body(exact: ExactCounts) -> bytes:
        return build_body(charge.key, config, charge.config_digest, charge.cost,
                          *noisy_releases(config, exact, rows_per_id))

    return or_noise_only(
        lambda: body(count(source, config.lsh_family(), config.grid_spec(),
                           dense_grid=config.grid_layout == "dense")),
        lambda: body(empty_counts(config)))


def make_release(
    state: StateDir,
    ledger: Ledger,
    *,
    study: str,
    config: StudyConfig,
    config_digest: str,
    source: Any,
    cost: PrivacyBudget,
    cap: PrivacyBudget,
    rows_per_id: int | None = None,
    counter: Counter | None = None,
) -> tuple[LedgerEntry, str | None]:
    """Reserve ``cost`` (charged from here on), read, draw noise once, store the body durably.

    Returns the stored ledger entry and the reason when the body is a noise-only substitute.
    """
    charge = Charge(secrets.token_urlsafe(24), study, config.version, config_digest, cost, cap)
    _, substitute = charged_release(
        ledger, charge,
        make=lambda: release_body(charge, config, source, rows_per_id, counter),
        store=lambda body, _: write_private(state.outbox_path(charge.key), body),
        status="stored", detail=lambda reason: reason and f"noise-only substitute: {reason}",
        abandon_on_failure=True)
    entry = ledger.entry(charge.key)
    assert entry is not None and entry.status == "stored"
    return entry, substitute
