"""How often a waiting member re-reads the round state (common.secagg.pacing)."""

import pytest

from common.secagg.pacing import Pacing


def test_pause_doubles_while_unchanged_up_to_the_cap_and_resets_on_change() -> None:
    pacing = Pacing.for_cohort(50, 0.1)
    assert (pacing.start, pacing.cap) == (0.1, 2.0)
    pauses = [pacing.next("keys") for _ in range(7)]
    assert pauses == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    assert pacing.next("masking") == 0.1  # a change: back to the start
    assert pacing.next("masking") == 0.2


@pytest.mark.parametrize("n", [5, 100, 1000])
def test_whole_cohort_rates_are_bounded_whatever_n(n: int) -> None:
    pacing = Pacing.for_cohort(n, 0.1)
    assert n / pacing.start <= 1000 or pacing.start == 0.1  # right after a change
    assert n / pacing.cap <= 25 or pacing.cap == pacing.start  # while waiting
    assert pacing.cap >= pacing.start


def test_thousand_members_wait_forty_seconds_at_most() -> None:
    pacing = Pacing.for_cohort(1000, 0.1)
    assert (pacing.start, pacing.cap) == (1.0, 40.0)


def test_poll_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Pacing.for_cohort(10, 0.0)
