"""Build, record, store and send one release; re-send a stored one after a failure.

Order of operations (each step durable before the next starts)::

    check local cap ─► exact histograms (chunked, local) ─► reserve in ledger (cap re-checked)
    ─► draw noise once (common.release) ─► encode ─► write body to outbox/<key>.json (fsync)
    ─► ledger: stored ─► POST (retries send these same bytes) ─► ledger: acknowledged

If the agent dies anywhere after the body is stored, the next ``contribute`` re-sends that
body byte for byte under the same idempotency key before doing anything else, and draws no
new noise; the coordinator answers a replay with the original contribution. A release that
never reached the outbox is marked ``abandoned``: its noise never left memory.

Only noisy counts, the config version/digest and the claimed (epsilon, delta) leave the
machine; never row counts, clipping counts or any other statistic of the local data.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from common.config import StudyConfig
from common.encoding import encode_release
from common.grid import GridSpec
from common.hashing import LSHFamily
from common.merge import merge_sparse
from common.schemas import ContributionCreate
from participant.client import CoordinatorClient, CoordinatorRefused
from participant.data import Chunk
from participant.ledger import Ledger, LedgerEntry
from participant.state import StateDir, write_private

if TYPE_CHECKING:  # OpenDP takes ~1 s to import: only where noise is drawn, not on workers
    from common.release import Release


@dataclass(frozen=True)
class SendResult:
    """Outcome of sending one stored release."""

    idempotency_key: str
    study: str
    contribution: dict[str, Any]
    resent: bool


@dataclass
class ExactCounts:
    """Exact local histograms: never leave the machine, only their noisy release does."""

    lsh: NDArray[np.int64]
    grid_dense: NDArray[np.int64] | None = None
    grid_cells: NDArray[np.int64] | None = None
    grid_counts: NDArray[np.int64] | None = None


def exact_histograms(
    source: Iterable[Chunk], family: LSHFamily, grid: GridSpec | None, *, dense_grid: bool
) -> ExactCounts:
    """Histograms are additive: accumulate them chunk by chunk with bounded memory."""
    out = ExactCounts(lsh=np.zeros(family.n_cells, dtype=np.int64))
    if grid is not None and dense_grid:
        out.grid_dense = np.zeros(grid.n_cells, dtype=np.int64)
    elif grid is not None:
        out.grid_cells = np.empty(0, dtype=np.int64)
        out.grid_counts = np.empty(0, dtype=np.int64)
    for chunk in source:
        out.lsh += family.histogram(chunk.X)
        if out.grid_dense is not None:
            out.grid_dense += grid.dense_counts(chunk.X)  # type: ignore[union-attr]
        elif grid is not None:
            out.grid_cells, out.grid_counts = merge_sparse(
                out.grid_cells, out.grid_counts, *grid.occupied(chunk.X)  # type: ignore[arg-type]
            )
    return out


def noisy_releases(config: StudyConfig, exact: ExactCounts) -> tuple[Release, Release | None]:
    """Draw the noise, once. Only called after the ledger has reserved the cost."""
    from common.release import release_grid_counts, release_lsh_counts

    p = config.privacy
    lsh = release_lsh_counts(exact.lsh, config.lsh_family().n_tables, p.epsilon_lsh)
    grid = None
    if exact.grid_dense is not None:
        grid = release_grid_counts(exact.grid_dense, config.grid_cells, p.epsilon_grid)
    elif exact.grid_cells is not None and exact.grid_counts is not None:
        grid = release_grid_counts((exact.grid_cells, exact.grid_counts), config.grid_cells,
                                   p.epsilon_grid, p.delta_grid)
    return lsh, grid


def build_body(key: str, config: StudyConfig, config_digest: str, lsh: Release,
               grid: Release | None) -> bytes:
    """The exact request body; stored before sending and re-sent unchanged on retry."""
    cost = config.release_cost()
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
        raise
    ledger.mark(entry.idempotency_key, "acknowledged", contribution_id=str(answer.get("id")))
    return SendResult(entry.idempotency_key, entry.study, answer, resent)


def recover(state: StateDir, ledger: Ledger) -> None:
    """Settle releases left by a crash (caller holds the state lock)."""
    for entry in ledger.entries(status="intended"):
        stored = state.outbox_path(entry.idempotency_key).exists()
        ledger.mark(entry.idempotency_key, "stored" if stored else "abandoned")


def release_and_send(
    state: StateDir,
    ledger: Ledger,
    client: CoordinatorClient,
    *,
    study: str,
    config: StudyConfig,
    config_digest: str,
    exact: ExactCounts,
    cap: Any,
) -> SendResult:
    """Reserve, draw noise once, store the body durably, then send it."""
    key = secrets.token_urlsafe(24)
    ledger.reserve(
        idempotency_key=key,
        study=study,
        config_version=config.version,
        config_digest=config_digest,
        cost=config.release_cost(),
        cap=cap,
    )
    lsh, grid = noisy_releases(config, exact)
    body = build_body(key, config, config_digest, lsh, grid)
    write_private(state.outbox_path(key), body)
    ledger.mark(key, "stored")
    entry = ledger.entries(status="stored", study=study)
    mine = next(e for e in entry if e.idempotency_key == key)
    return send_stored(state, ledger, client, mine, resent=False)
