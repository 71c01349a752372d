"""PrivacyBudget is exact, frozen, and a ledger built on it never passes its cap."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.budget import PrivacyBudget


def test_no_drift() -> None:
    total = PrivacyBudget.zero()
    for _ in range(10):
        total = total + PrivacyBudget("0.1", "1e-7")
    assert total == PrivacyBudget(1, "1e-6")
    assert total.to_units() == (10**9, 10**12)


@pytest.mark.parametrize(
    ("epsilon", "delta", "exc", "match"),
    [
        (0.1, 0, TypeError, "floats drift"),
        (1, 0.0, TypeError, "floats drift"),
        (True, 0, TypeError, "bool"),
        ("-0.1", 0, ValueError, ">= 0"),
        ("NaN", 0, ValueError, "finite"),
        ("Infinity", 0, ValueError, "finite"),
        (Decimal("-inf"), 0, ValueError, "finite"),
        ("abc", 0, ValueError, "decimal number"),
        ("1e-10", 0, ValueError, "multiple of 1E-9"),
        (1, "1e-19", ValueError, "multiple of 1E-18"),
        (1, "1.5", ValueError, "<= 1"),
        (10**10, 0, ValueError, "too large"),
        ("1" * 100, 0, ValueError, "too large"),
        ("1e999999999", 0, ValueError, "too large"),
        ("1e-999999999", 0, ValueError, "multiple"),
    ],
)
def test_invalid(epsilon: object, delta: object, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        PrivacyBudget(epsilon, delta)  # type: ignore[arg-type]


def test_frozen_and_hashable() -> None:
    b = PrivacyBudget("1.50")
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.epsilon = Decimal(2)  # type: ignore[misc]
    assert {b, PrivacyBudget("1.5")} == {PrivacyBudget(" 1.5 ")}


def test_fits_within_and_remaining() -> None:
    cap = PrivacyBudget(1, "1e-6")
    assert PrivacyBudget(1, "1e-6").fits_within(cap)
    assert not PrivacyBudget("1.000000001").fits_within(cap)
    assert not PrivacyBudget("0.5", "2e-6").fits_within(cap)
    assert cap.remaining(PrivacyBudget("0.25")) == PrivacyBudget("0.75", "1e-6")
    assert cap.remaining(PrivacyBudget(2, "1e-5")) == PrivacyBudget.zero()


def test_delta_composition_saturates_at_one() -> None:
    total = PrivacyBudget(0, "0.6") + PrivacyBudget(0, "0.6")
    assert total.delta == 1
    assert not total.fits_within(PrivacyBudget(100, "0.999"))


def test_units_round_trip_and_str() -> None:
    b = PrivacyBudget("2.000000007", "3e-12")
    assert PrivacyBudget.from_units(*b.to_units()) == b
    assert str(PrivacyBudget("0.10")) == "(epsilon=0.1, delta=0)"
    with pytest.raises(TypeError):
        PrivacyBudget.from_units(1.0)  # type: ignore[arg-type]


charges = st.lists(st.tuples(st.integers(0, 3 * 10**9), st.integers(0, 10**12)), max_size=60)


@given(cap=st.tuples(st.integers(0, 10**10), st.integers(0, 10**13)), charges=charges)
def test_ledger_never_passes_cap(cap: tuple[int, int], charges: list[tuple[int, int]]) -> None:
    cap_b = PrivacyBudget.from_units(*cap)
    spent = PrivacyBudget.zero()
    admitted_units = [0, 0]
    for eps, delta in charges:
        asked = PrivacyBudget.from_units(eps, delta)
        if (spent + asked).fits_within(cap_b):
            spent = spent + asked
            admitted_units[0] += eps
            admitted_units[1] += delta
        assert spent.fits_within(cap_b)
    assert spent.to_units() == tuple(admitted_units)
    assert admitted_units[0] <= cap[0] and admitted_units[1] <= cap[1]
