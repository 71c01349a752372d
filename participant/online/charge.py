"""A stream window's charge: both caps checked, then reserved in the local ledger.

A window is charged *before* its first query decision (``docs/ONLINE.md``); a cap that
refuses it stops the stream with :class:`StreamCapReached` before any decision or noise of
that window. The coordinator charges a release when it receives it, so its remaining budget
must hold this window and every stored release not yet sent.
"""

from __future__ import annotations

from common.budget import PrivacyBudget
from common.errors import BudgetExceeded, ConfigError
from participant.client import CoordinatorClient
from participant.online.notes import OPEN, cap_fix
from participant.release.flow import Charge
from participant.release.ledger import Ledger

__all__ = ["StreamCapReached", "StreamConfigChanged", "reserve_window"]


class StreamCapReached(BudgetExceeded):
    """The next window's charge does not fit a cap: the stream stopped before drawing."""

    exit_code = 8


class StreamConfigChanged(ConfigError):
    """The study's online section changed: this stream's state cannot continue under it."""


def _budget(value: object, default: PrivacyBudget | None = None) -> PrivacyBudget:
    if isinstance(value, PrivacyBudget):
        return value
    return default or PrivacyBudget.zero()


def reserve_window(charge: Charge, window: int, *, unsent: int, client: CoordinatorClient,
                   ledger: Ledger) -> None:
    """Reserve ``window``'s ``charge`` after checking the coordinator's cap (for it and the
    ``unsent`` stored releases before it) and the local one. The window's release is drawn
    when it ends and kept by the stream store, which sends it: the ledger marks the charge
    ``kept`` (:mod:`participant.release.ledger`)."""
    cost = charge.cost
    there = client.budget()
    owed = PrivacyBudget.from_units(*(u * (unsent + 1) for u in cost.to_units()))
    where = "the coordinator's"
    try:
        if not owed.fits_within(there.remaining):
            raise BudgetExceeded(
                f"the coordinator's ledger has {there.remaining} left of your cap there",
                spent=there.spent, asked=owed, cap=there.cap)
        where = "your local"
        charge.reserve(ledger)
    except BudgetExceeded as exc:
        raise StreamCapReached(
            f"privacy cap reached: schedule window {window} of this stream costs {cost} "
            f"and does not fit {where} cap ({exc}). The stream stopped before deciding or "
            f"noising any record of it; its position is kept. {cap_fix(cost)}",
            spent=_budget(exc.context.get("spent")), asked=cost,
            cap=_budget(exc.context.get("cap"), charge.cap)) from exc
    ledger.mark(charge.key, "kept", detail=f"stream window {window}: charged once for its "
                f"slots, {OPEN}")
