"""Local ledger (cap never exceeded, states, newest config) and state-dir permissions."""

from __future__ import annotations

import contextlib
import stat
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.budget import PrivacyBudget
from common.errors import BudgetExceeded
from participant.release.ledger import Ledger
from participant.state import Enrolment, StateDir, write_private


def reserve(ledger, key, eps, cap, delta="0", study="s1"):
    ledger.reserve(
        idempotency_key=key,
        study=study,
        config_version=1,
        config_digest="d" * 64,
        cost=PrivacyBudget(eps, delta),
        cap=cap,
    )


def test_reserve_refuses_past_cap_and_records_nothing(tmp_path):
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        cap = PrivacyBudget("1")
        reserve(ledger, "a" * 16, "0.6", cap)
        with pytest.raises(BudgetExceeded, match="already spent"):
            reserve(ledger, "b" * 16, "0.5", cap)
        assert [e.idempotency_key for e in ledger.entries()] == ["a" * 16]
        reserve(ledger, "c" * 16, "0.4", cap)
        assert ledger.spent() == PrivacyBudget("1")


def test_delta_is_capped_too(tmp_path):
    with Ledger(tmp_path / "l.sqlite3") as ledger, pytest.raises(BudgetExceeded):
        reserve(ledger, "a" * 16, "0.1", PrivacyBudget("5", "1e-7"), delta="1e-6")


@pytest.mark.parametrize(
    "status",
    ["stored", "kept", "acknowledged", "rejected", "abandoned"],
)
def test_every_state_counts_as_spent(tmp_path, status):
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        reserve(ledger, "a" * 16, "0.5", PrivacyBudget("1"))
        ledger.mark("a" * 16, status, contribution_id="c9")
        assert ledger.spent() == PrivacyBudget("0.5")  # never refunded once reserved
        assert ledger.entries(status=status)[0].contribution_id == "c9"


def test_an_older_ledger_s_locally_kept_release_reads_as_kept(tmp_path):
    """Before ``kept`` existed, a release kept locally (a secure or cohort round's vector, a
    stream window) was marked ``acknowledged`` with no contribution id: it reads as kept."""
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        reserve(ledger, "secagg-s1-1", "0.5", PrivacyBudget("1"))
        ledger.mark("secagg-s1-1", "acknowledged", detail="noisy vector stored locally")
        reserve(ledger, "a" * 16, "0.25", PrivacyBudget("1"))
        ledger.mark("a" * 16, "acknowledged", contribution_id="c9")
        assert [e.status for e in ledger.entries()] == ["kept", "acknowledged"]
        assert [e.idempotency_key for e in ledger.entries(status="kept")] == ["secagg-s1-1"]
        assert ledger.entry("a" * 16).status == "acknowledged"
        assert ledger.spent() == PrivacyBudget("0.75")


def test_ledger_survives_reopen_and_keeps_newest_config(tmp_path):
    path = tmp_path / "l.sqlite3"
    with Ledger(path) as ledger:
        reserve(ledger, "a" * 16, "0.25", PrivacyBudget("1"))
        ledger.see_config("s1", 3)
        ledger.see_config("s1", 2)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with Ledger(path) as ledger:
        assert ledger.spent() == PrivacyBudget("0.25")
        assert ledger.newest_seen("s1") == 3
        assert ledger.newest_seen("other") is None


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=400), min_size=1, max_size=15))
def test_ledger_never_exceeds_cap(tmp_path_factory, costs):
    cap = PrivacyBudget("1")
    with Ledger(tmp_path_factory.mktemp("l") / "l.sqlite3") as ledger:
        for i, milli in enumerate(costs):
            cost = Decimal(milli) / 1000
            with contextlib.suppress(BudgetExceeded):
                reserve(ledger, f"key-{i:012d}", str(cost), cap)
            assert ledger.spent().fits_within(cap)


def test_state_dir_is_owner_only(tmp_path):
    state = StateDir(tmp_path / "st")
    state.save_enrolment(
        Enrolment("http://c", "secret-token", "sha256:" + "0" * 64, "2", "0"), "PEM"
    )
    for path in (state.root, state.root / "outbox", state.root / "studies"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    for path in (state.enrolment_path, state.key_path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    state.enrolment_path.chmod(0o644)
    assert state.load_enrolment().cap == PrivacyBudget("2")
    assert stat.S_IMODE(state.enrolment_path.stat().st_mode) == 0o600
    write_private(state.outbox_path("k" * 16), b"body")
    assert stat.S_IMODE(state.outbox_path("k" * 16).stat().st_mode) == 0o600


def test_study_ids_cannot_escape_the_state_dir(tmp_path):
    with pytest.raises(ValueError, match="invalid study id"):
        StateDir(tmp_path).study_dir("../../etc")
