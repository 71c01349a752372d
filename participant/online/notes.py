"""Texts that explain a stream's charges to its operator: the exit-8 fix and why the local
ledger and the coordinator's differ (``fedod-participant status``)."""

from __future__ import annotations

from collections.abc import Sequence

from common.budget import PrivacyBudget
from participant.release.ledger import LedgerEntry

__all__ = ["OPEN", "cap_fix", "spending_note", "window_key"]

OPEN = "open"
"""The detail of a stream window's ledger entry while the window is open."""


def window_key(stream_id: str, window: int) -> str:
    """The ledger key of a stream's schedule window (one charge per window)."""
    return f"stream-{stream_id}-w{window}"


def cap_fix(cost: PrivacyBudget) -> str:
    """What to do at exit 8: a stream is charged epsilon *and* delta every window, so both
    ledgers need a delta cap."""
    return (f"Every window is charged {cost} (delta too), so a stream needs an epsilon and a "
            "delta cap on both ledgers: the coordinator's operator raises yours with "
            "'fedod-coordinator participant raise-cap NAME --epsilon-cap E --delta-cap D', and "
            "you raise the local one by enrolling again with the larger caps ('fedod-participant "
            "enrol ... --epsilon-cap E --delta-cap D'; the ledger is kept); then run 'stream' "
            "again, it resumes here.")


def spending_note(entries: Sequence[LedgerEntry], local: PrivacyBudget,
                  there: PrivacyBudget) -> str | None:
    """Why ``local`` (this ledger's total) and ``there`` (the coordinator's) differ, or None
    when they agree. The local ledger charges *before* anything is drawn or sent; the
    coordinator charges a release when it receives it."""
    if local == there:
        return None
    windows = [e for e in entries if e.idempotency_key.startswith("stream-")
               and e.detail is not None and e.detail.endswith(OPEN)]
    stored = [e for e in entries if e.status in ("intended", "stored")]
    return (f"local {local} and coordinator {there} differ because this ledger charges first: "
            f"{len(windows)} stream window(s) are open (charged here before their first query "
            "decision; the coordinator charges a window when its one release arrives, after "
            f"the window ends) and {len(stored)} release(s) are charged here but not yet "
            "acknowledged (sent again on the next run). A stream window whose release was "
            "stored but not yet acknowledged also counts here only. The totals agree once those "
            "releases reach the coordinator; the coordinator's figure is the one its cap checks.")
