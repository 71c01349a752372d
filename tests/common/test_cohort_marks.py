"""Marking released cohort centres that are no finding (common.cohorts.marks): size within the
noise, never moved from the public start, at a corner of the box; from public values only."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

from common.cohorts import marks
from common.cohorts.marks import CentreMark, count_noise_sd, mark_centres, marks_of, public_starts
from common.cohorts.model import CohortModel, Condition
from common.cohorts.params import CohortParams
from common.cohorts.protocol import KMeansProtocol
from common.cohorts.study import protocol_for
from common.noise.scale import discrete_laplace_sd

LO, HI = np.array([0.0, 10.0]), np.array([1.0, 20.0])


def _model(centroids, masses, rules=()) -> CohortModel:
    return CohortModel(np.array(centroids, dtype=float), np.array(masses, dtype=float), LO, HI,
                       rules)


def test_each_mark_on_a_hand_made_model() -> None:
    model = _model([[0.5, 15.0], [1.0, 10.0], [0.25, 12.0], [0.7, 18.0]], [50, 40, 3.9, 4.1])
    got = mark_centres(model, count_sd=2.0, starts=[[0.25, 12.0], [0.9, 19.0]])
    assert got == (CentreMark(False, False, False),   # a finding
                   CentreMark(False, False, True),    # (hi, lo): a corner of the box
                   CentreMark(True, True, False),     # 3.9 <= 2 sd, and its seed start
                   CentreMark(False, False, False))   # 4.1 > 2 sd: just over the line
    assert got[0].describe() == ""
    assert got[2].describe() == ("not a finding: size within the noise; never moved from its "
                                 "start")
    assert got[1].flags == ("corner",)


def test_one_coordinate_on_a_bound_is_no_corner() -> None:
    got = mark_centres(_model([[0.0, 15.0], [0.0, 20.0]], [100, 100]), count_sd=1.0)
    assert [m.corner for m in got] == [False, True]


def test_aligned_starts_count_only_a_cohorts_own_start() -> None:
    model = _model([[0.5, 15.0], [0.25, 12.0]], [100, 100])
    starts = [[0.25, 12.0], [0.5, 15.0]]  # each centre is the other's start
    assert [m.unmoved for m in mark_centres(model, 1.0, starts)] == [True, True]
    assert [m.unmoved for m in mark_centres(model, 1.0, starts, aligned=True)] == [False, False]
    with pytest.raises(ValueError, match="one row per cohort"):
        mark_centres(model, 1.0, starts[:1], aligned=True)


def test_the_rule_reads_no_data() -> None:
    """Its inputs are the released model, a public noise figure and public starts."""
    for fn in (mark_centres, marks_of, public_starts):
        params = set(inspect.signature(fn).parameters)
        assert params <= {"model", "count_sd", "starts", "aligned", "sds", "protocol",
                          "participants"}, fn


def test_count_noise_sd_is_the_summed_discrete_laplace_spread() -> None:
    assert count_noise_sd(0.5, 4) == pytest.approx(2 * discrete_laplace_sd(2.0))
    with pytest.raises(ValueError):
        count_noise_sd(0.0, 3)


def _run(proto: KMeansProtocol, parts: list[np.ndarray]) -> CohortModel:
    state = proto.start()
    while not proto.finished(state):
        releases = [proto.release(proto.exact(state, x), state) for x in parts]
        state = proto.advance(state, releases)
    return proto.finish(state)


def test_a_kmeans_run_marks_the_seed_centroids_no_record_reached() -> None:
    """One tight cluster, k = 3 without fusion: the centroid nearest to it moves onto it and is
    never marked; the two others mostly keep their seed starts with noisy sizes near 0.

    The counts carry real (CSPRNG) noise, so the marks of the empty centres are random: an
    empty centre's noisy count can exceed 2 sd (the ``noise`` mark's line, a few per cent for
    a discrete Laplace sum) or be positive enough to move it. 40 runs: the found cluster is
    right in every run; the empty centres are marked ``noise`` in at least 80 % of the 80
    cases and ``unmoved`` in at least 75 % (measured: about 100 % and 97 %; a binomial tail
    at these lines is below 1e-6)."""
    params = CohortParams(k=3, over=1, rounds=2, epsilon="20")
    proto = protocol_for(params, LO.tolist(), HI.tolist(), b"marks-seed")
    assert isinstance(proto, KMeansProtocol)
    rng = np.random.default_rng(4)
    parts = [np.column_stack([rng.normal(0.4, 0.01, 300), rng.normal(14.0, 0.1, 300)])
             for _ in range(3)]
    sd = count_noise_sd(float(proto.plan.budgets()[-1][0]), 3)
    empty: list[tuple[CentreMark, float]] = []
    for _ in range(40):
        model = _run(proto, parts)
        got = marks_of(proto, model, participants=3)
        big = int(np.argmax(model.masses))
        assert got[big] == CentreMark(False, False, False)
        # within 5 % of the box per coordinate (measured over 300 runs: at most 2.4 %)
        assert np.all(np.abs(model.centroids[big] - [0.4, 14.0]) <= 0.05 * (HI - LO)), model
        empty += [(m, float(model.masses[i])) for i, m in enumerate(got) if i != big]
    assert sum(m.noise for m, _ in empty) >= 64, empty
    assert sum(m.unmoved for m, _ in empty) >= 60, empty
    assert all(m.noise == (mass <= marks.NOISE_SDS * sd) for m, mass in empty)


def test_dpm_starts_are_the_middles_of_the_rule_boxes() -> None:
    rules = ((Condition(0, 0.5, False),), (Condition(0, 0.5, True), Condition(1, 12.0, True)))
    model = _model([[0.25, 15.0], [0.6, 16.0]], [80, 80], rules)
    params = CohortParams(method="dpm", epsilon="2", depth=2, bins=8)
    proto = protocol_for(params, LO.tolist(), HI.tolist(), b"dpm-seed")
    np.testing.assert_allclose(public_starts(proto, model), [[0.25, 15.0], [0.75, 16.0]])
    got = marks_of(proto, model, participants=2)
    assert [m.unmoved for m in got] == [True, False]
    assert not any(m.noise for m in got)
    assert math.isfinite(count_noise_sd(float(proto.plan.budgets().leaf_counts), 2))


def test_flags_read_back() -> None:
    mark = CentreMark(True, False, True)
    assert CentreMark.from_flags(list(mark.flags)) == mark
    with pytest.raises(ValueError, match="unknown"):
        CentreMark.from_flags(["noisy"])
