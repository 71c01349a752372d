"""The stream's public schedule (participant side, coordinator faked): what the coordinator
sees is the schedule whatever the stream's length, records beyond a window's slots are not
learnt from, the cap stops before a window is opened, and a re-signed config is picked up
only when its online section is unchanged."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from stream_kit import ONLINE, SLOTS, FakeCoordinator, P, Run, study

from participant.online.charge import StreamCapReached, StreamConfigChanged


def transcript(posts: list[dict]) -> tuple:
    """What the schedule fixes: windows, claims and order of the releases."""
    return tuple((p["window"], p["epsilon"], p["delta"], p["config_version"]) for p in posts)


@pytest.mark.slow
def test_coordinator_transcript_does_not_depend_on_the_stream_length(tmp_path):
    """Streams of 0, 7, 20 and 33 records in window 0 (20 slots), then an empty window 1:
    the number, order, windows and claims of the releases are the same in every run, and the
    queried-slot counts follow the same Binomial(20, p) whatever the length (zero weights:
    a real record and an empty slot are queried alike; with trained weights the counts differ
    by what the private query decisions allow, nothing more)."""
    runs = 60
    seen: dict[int, Counter] = {}
    counts: dict[int, list[int]] = {}
    for length in (0, 7, 20, 33):
        seen[length], counts[length] = Counter(), []
        for k in range(runs):
            run = Run(tmp_path / f"{length}-{k}")
            run.feed(length)
            run.to(1)
            run.to(2)
            seen[length][transcript(run.coordinator.posts)] += 1
            counts[length] += [p["count"] for p in run.coordinator.posts]
            assert len(run.ledger.entries()) == 3  # windows 0, 1 and the open 2: charged
            run.close()
    cost = ONLINE.epoch_cost()
    claim = (str(cost.epsilon.normalize()), str(cost.delta.normalize()), 1)
    expected = Counter({((0, *claim), (1, *claim)): runs})
    assert all(seen[length] == expected for length in seen), seen
    mean, sd = SLOTS * P, (SLOTS * P * (1 - P) / (2 * runs)) ** 0.5
    for length, values in counts.items():
        assert abs(np.mean(values) - mean) < 4.5 * sd, (length, np.mean(values))


def test_records_beyond_the_slots_are_scored_but_not_learnt(tmp_path):
    run = Run(tmp_path)
    run.feed(SLOTS + 5)
    rows = run.store._db.execute("SELECT slot, queried FROM records ORDER BY seq").fetchall()
    assert [s for s, _ in rows] == [*range(SLOTS), *[None] * 5]
    assert all(q == 0 for s, q in rows if s is None)
    assert run.store.counts()["beyond_slots"] == 5
    run.to(1)
    [post] = run.coordinator.posts
    assert post["window"] == 0 and post["count"] == sum(q for _, q in rows)  # no padding
    run.close()


def test_unanswered_queries_are_resolved_when_their_window_closes(tmp_path):
    run = Run(tmp_path)
    run.feed(SLOTS)
    queried = [r for (r,) in run.store._db.execute("SELECT id FROM records WHERE queried=1")]
    assert queried, "p = 0.5 over 20 slots"
    assert run.streamer.label(queried[0], 1)
    run.to(1)
    assert run.store.n_awaiting() == 0
    assert not run.streamer.label(queried[-1], -1)  # too late: its window is released
    assert run.store.counts()["labelled"] == 1
    run.close()


def test_cap_stops_before_a_window_is_opened(tmp_path):
    cost = ONLINE.epoch_cost()
    run = Run(tmp_path, cap=str(cost.epsilon * 2))
    run.feed(5)
    run.to(1)  # window 0 released, window 1 charged: the cap is spent
    with pytest.raises(StreamCapReached, match="schedule window 2"):
        run.to(2)
    assert [p["window"] for p in run.coordinator.posts] == [0, 1]  # window 1 closed first
    assert run.store.window() == (1, 1, 0) and len(run.ledger.entries()) == 2
    run.close()


def test_a_restart_charges_no_window_twice(tmp_path):
    first = Run(tmp_path)
    first.feed(5)
    first.close()
    again = Run(tmp_path)  # the same files: window 0 is open and charged
    again.feed(5, start=5)
    again.to(1)
    assert len(again.ledger.entries()) == 2 and again.store.counts()["records"] == 10
    assert [p["window"] for p in again.coordinator.posts] == [0]
    again.close()


def test_a_resigned_config_is_picked_up_when_the_online_section_is_unchanged(tmp_path):
    coordinator = FakeCoordinator(refuse_config=1)
    run = Run(tmp_path, coordinator=coordinator, refetch=lambda: (study(2), "e" * 64))
    run.feed(3)
    run.to(1)
    [post] = coordinator.posts
    assert (post["config_version"], post["config_digest"], post["window"]) == (2, "e" * 64, 0)
    [(key, body)] = run.store._db.execute("SELECT key, body FROM releases").fetchall()
    assert post["idempotency_key"] == key and json.loads(body) == post  # same noisy bytes
    run.close()


def test_a_resigned_config_with_another_online_section_stops_the_stream(tmp_path):
    changed = study(2, ONLINE.model_copy(update={"window_slots": 40}))
    run = Run(tmp_path, coordinator=FakeCoordinator(refuse_config=1),
              refetch=lambda: (changed, "e" * 64))
    run.feed(3)
    with pytest.raises(StreamConfigChanged, match="different online section"):
        run.to(1)
    assert run.store.stored_releases()  # kept, not re-wrapped
    run.close()
