"""The texts that explain a stream's charges: the exit-8 fix, and why the local ledger and the
coordinator's differ (``fedod-participant status``)."""

from __future__ import annotations

from decimal import Decimal

from common.budget import PrivacyBudget
from participant.online.notes import OPEN, cap_fix, spending_note, window_key
from participant.release.ledger import LedgerEntry


def entry(key: str, status: str, detail: str | None) -> LedgerEntry:
    return LedgerEntry(key, "s", 1, "d" * 64, PrivacyBudget(2, Decimal("1e-6")), status,
                       "t", "t", None, detail)


def test_cap_fix_names_both_ledgers_and_the_delta_cap() -> None:
    text = cap_fix(PrivacyBudget(2, Decimal("1e-6")))
    assert "raise-cap NAME --epsilon-cap E --delta-cap D" in text
    assert "fedod-participant enrol ... --epsilon-cap E --delta-cap D" in text
    assert "delta" in text and "both ledgers" in text


def test_spending_note_counts_open_windows_and_unsent_releases() -> None:
    entries = [entry(window_key("abc", 0), "kept", "stream window 0: ..., closed"),
               entry(window_key("abc", 1), "kept", f"stream window 1: ..., {OPEN}"),
               entry("k" * 16, "stored", None), entry("j" * 16, "acknowledged", None)]
    local, there = PrivacyBudget(8, Decimal("3e-6")), PrivacyBudget(4, Decimal("1e-6"))
    note = spending_note(entries, local, there)
    assert note is not None
    assert "1 stream window(s) are open" in note and "1 release(s) are charged here" in note
    assert spending_note(entries, local, local) is None
