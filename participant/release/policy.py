"""Participant-side privacy policy: the checks a release passes *before* it reads any record.

None of these checks looks at the data, so a refusal tells the coordinator nothing about it
(docs/TRUST.md). Once the data is read, nothing may depend on it but the noisy release itself
(see :mod:`participant.release.contribute`).

- **Both caps** (:meth:`participant.release.ledger.Ledger.check` here,
  :func:`check_coordinator_budget` there): a release neither ledger would accept is refused
  before anything is drawn.
- **Per-release ceiling** (:func:`check_ceiling`): set at enrolment; a config that spends
  more epsilon or more delta in one release is refused, whatever the remaining cap.
- **Approved schema** (:func:`check_schema`): the columns a release uses are stored at the
  first release of a study (or by ``approve``); a later config that releases other columns
  (e.g. an ignored label becoming a feature) is refused until the operator approves it.
- **Column roles** (:func:`check_column_roles`): a column named as the record key or as
  ignored is never released, whatever the config says.
- **Out of bounds** (:func:`check_release_options`): a release always clips to the config's
  bounds. Refusing a file with a value outside bounds the *coordinator* chose would answer
  "is some value above t?" for free, so ``--out-of-bounds error`` is for ``check-data`` and
  ``score`` only.
- **Send slot** (:func:`send_schedule`): a release is sent ``slot`` seconds after its config
  was fetched, however long reading the data took; if it took longer, at the next multiple
  of the slot (that overrun is the residual timing channel, warned about locally).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from common.budget import PrivacyBudget
from common.errors import BudgetExceeded, ConfigError, SchemaMismatch
from common.histograms.release_bounds import MAX_ROWS_PER_ID
from common.study.config import StudyConfig
from participant.client import CoordinatorClient

if TYPE_CHECKING:
    from participant.options import DataOptions

DEFAULT_SEND_SLOT = 30.0
"""Seconds from config fetch to POST; covers ~1M rows with a sparse grid (measured: 10.4 s)."""


class SchemaNotApproved(ConfigError):
    """The config releases columns the operator has not approved; run ``approve``."""


def send_schedule(anchor: float, slot: float, ready: float) -> tuple[float, int]:
    """When to send a release whose body was ready at ``ready`` (same clock as ``anchor``).

    Returns ``(send_at, slots)``: ``anchor + slots * slot`` with ``slots`` the smallest
    integer >= 1 such that the body is ready by then. Only ``slots`` depends on the data, and
    only when reading took longer than one slot. ``slot == 0`` sends as soon as ready
    (no padding; for tests and demos only).
    """
    if slot < 0 or not math.isfinite(slot):
        raise ValueError(f"send slot must be a finite number of seconds >= 0, got {slot}")
    if slot == 0:
        return ready, 0
    slots = max(1, math.ceil((ready - anchor) / slot))
    return anchor + slots * slot, slots


def check_coordinator_budget(client: CoordinatorClient, cost: PrivacyBudget) -> None:
    """Refuse, before any noise is drawn, a release the coordinator's ledger would refuse
    (it would still count as spent here: its noisy bytes would have left)."""
    there = client.budget()
    if not cost.fits_within(there.remaining):
        raise BudgetExceeded(
            f"the coordinator's ledger has {there.remaining} left of your cap there "
            f"{there.cap} (spent there: {there.spent}); this release costs {cost}. Nothing "
            "was drawn or sent, and nothing was spent. Ask the coordinator's administrator "
            "to raise your cap.",
            spent=there.spent, asked=cost, cap=there.cap)


def check_ceiling(cost: PrivacyBudget, ceiling: PrivacyBudget) -> None:
    """Refuse a release whose epsilon or delta exceeds the per-release ceiling set at
    enrolment (every release kind calls this before it reads a record)."""
    for name, asked, most in (("epsilon", cost.epsilon, ceiling.epsilon),
                              ("delta", cost.delta, ceiling.delta)):
        if asked > most:
            raise BudgetExceeded(
                f"this release asks {name} {asked.normalize():f}, above the per-release "
                f"ceiling {most.normalize():f} set at enrolment (--max-release-{name}); "
                "nothing was read, drawn or charged",
                spent=PrivacyBudget.zero(), asked=cost, cap=ceiling,
                source="per-release ceiling",
            )


def released_columns(config: StudyConfig) -> list[str]:
    """Columns whose values enter a release: every feature goes through the LSH tables."""
    return [f.name for f in config.features]


def schema_doc(config: StudyConfig) -> dict[str, Any]:
    return {"study": config.study_id, "columns": released_columns(config),
            "config_version": config.version,
            "approved_at": datetime.now(UTC).isoformat(timespec="seconds")}


def check_schema(
    approved: dict[str, Any] | None, config: StudyConfig, *, approve: bool
) -> dict[str, Any] | None:
    """Return the schema document to store (first use or explicit approval), None when the
    approved one still holds; raise :class:`SchemaNotApproved` when the columns changed."""
    columns = released_columns(config)
    if approved is None or approve:
        return schema_doc(config)
    before = list(approved["columns"])
    if set(before) == set(columns):
        return None
    added = [c for c in columns if c not in before]
    removed = [c for c in before if c not in columns]
    raise SchemaNotApproved(
        f"config v{config.version} of study {config.study_id} releases other columns than the "
        f"ones approved at v{approved.get('config_version')} (added: {added}, removed: "
        f"{removed}); nothing was read. Review the change, then run 'fedod-participant "
        f"approve {config.study_id}' (or pass --approve-schema)",
        added=added, removed=removed,
    )


def check_column_roles(config: StudyConfig, id_column: str | None, ignore: tuple[str, ...]) -> None:
    """A column the operator named as record key or ignored must never be released."""
    local = set(ignore) | ({id_column} if id_column else set())
    clash = [c for c in released_columns(config) if c in local]
    if clash:
        raise SchemaMismatch(
            f"the config of study {config.study_id} makes {clash} features, but you named "
            f"them as record key (--id-column) or ignored (--ignore-column); refusing to "
            f"release them. Nothing was read.",
            columns=clash,
        )


def check_release_options(
    config: StudyConfig, *, on_out_of_bounds: str, id_column: str | None,
    rows_per_id: int | None,
) -> None:
    """Options a release needs, checked before anything is read."""
    if on_out_of_bounds != "clip":
        raise ValueError(
            "--out-of-bounds error applies to check-data and score only: a release always "
            "clips to the study's bounds, because refusing a file with a value outside bounds "
            "the coordinator chose would tell it whether such a value exists. Run "
            "'check-data --out-of-bounds error' first to see those values locally."
        )
    if rows_per_id is None:
        return
    if rows_per_id < 1:
        raise ValueError(f"--rows-per-id must be >= 1, got {rows_per_id}")
    if id_column is None:
        raise ValueError("--rows-per-id needs --id-column (the patient key)")
    if rows_per_id > MAX_ROWS_PER_ID:
        raise ValueError(
            f"--rows-per-id {rows_per_id} is above {MAX_ROWS_PER_ID}, the largest the "
            "coordinator's public poisoning bounds allow for "
            "(common.histograms.release_bounds): its noise would be refused there after the "
            "local charge"
        )
    if rows_per_id > 1 and config.grid_layout == "sparse":
        raise ValueError(
            f"--rows-per-id {rows_per_id} with a sparse grid is not supported: the "
            "thresholded release is calibrated for one row per person; use --rows-per-id 1 "
            "or ask the coordinator for a dense grid"
        )


def check_release_request(config: StudyConfig, cost: PrivacyBudget, ceiling: PrivacyBudget,
                          options: DataOptions) -> None:
    """The checks of a release of ``cost`` under ``config`` that read no record and ask
    nobody: the release options, the per-release ceiling, the column roles."""
    check_release_options(config, on_out_of_bounds=options.on_out_of_bounds,
                          id_column=options.id_column, rows_per_id=options.rows_per_id)
    check_ceiling(cost, ceiling)
    check_column_roles(config, options.id_column, options.ignore)
