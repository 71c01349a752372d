"""Centring in ``fedod-participant stream`` (coordinator faked): the centring window queries
nothing and makes one release, the noisy sum of its slots' records; later records are
centred on the served centre; a restart re-spends nothing; a centring release refused
because the centre is fixed is not re-sent; a centring window whose centre is fixed before
it opens is skipped (nothing charged or released); windows before the centring window are
scored only."""

from __future__ import annotations

import contextlib
import json

import httpx
import numpy as np
from stream_kit import ONLINE, SLOTS, Exact, FakeCoordinator, Run, study

from common.online import centre_from_release, to_ball
from common.online.wire import CENTRE_FIXED, decode_vector, encode_vector
from participant.client import CoordinatorRefused, CoordinatorUnavailable

CENTRED = ONLINE.model_copy(update={"centre_window": 0})


class CentreCoordinator(FakeCoordinator):
    """Serves the centre of the centring releases it accepted (window 0, SLOTS slots each);
    ``fixed``: refuses them as a coordinator that already stepped; ``down``: every POST fails."""

    def __init__(self, fixed: bool = False, down: bool = False, refuse_config: int = 0) -> None:
        super().__init__()
        self.fixed, self.down, self.refused = fixed, down, 0
        self.stale = refuse_config  # refuse this many POSTs as a stale config first

    def request(self, method: str, path: str, *, content: bytes | None = None,
                **kw: object) -> httpx.Response:
        doc = json.loads(content or b"{}")
        if method == "POST" and self.down:
            raise CoordinatorUnavailable("down")
        if method == "POST" and self.stale:
            self.stale -= 1
            raise CoordinatorRefused("stale", status=409, detail="config version 1 is not the "
                                     "current version 2 of study 's'")
        if method == "POST" and self.fixed and doc["window"] == 0:
            self.refused += 1
            raise CoordinatorRefused("late", status=409, detail=f"... arrived after the first "
                                     f"SGD step: {CENTRE_FIXED} ...")
        response = super().request(method, path, content=content, **kw)
        centring = [p for p in self.posts if p["window"] == 0]
        if method == "GET" and centring:
            total = sum(decode_vector(p["noisy_sum"], 3) for p in centring)
            centre = centre_from_release(total, SLOTS * len(centring))
            response = httpx.Response(200, json={**response.json(),
                                                 "centre": encode_vector(centre)})
        return response


def ball(start: int, n: int) -> np.ndarray:
    """The records ``Run.feed(n, start)`` streams, mapped into the ball."""
    rng = np.random.default_rng(start)
    rows = np.array([rng.uniform(0, 1, size=2) for _ in range(n)])
    return to_ball(rows, np.zeros(2), np.ones(2), 1.0)


def test_centring_window_queries_nothing_and_releases_its_record_sum(tmp_path):
    run = Run(tmp_path, coordinator=CentreCoordinator(), online=CENTRED)
    run.streamer.centre_noise = exact = Exact()  # type: ignore[assignment]
    run.feed(7)
    assert run.store.counts()["queried"] == 0 and run.store.n_awaiting() == 0
    assert not run.streamer.label("r0", 1)  # never queried: a label is not used
    run.to(1)
    [post] = run.coordinator.posts
    assert (post["window"], post["count"]) == (0, SLOTS)  # all slots, 13 of them empty
    [total] = exact.calls  # noise drawn once, on the sum of the 7 records
    np.testing.assert_allclose(total, ball(0, 7).sum(axis=0))
    np.testing.assert_allclose(decode_vector(post["noisy_sum"], 3), total)
    assert len(run.ledger.entries()) == 2  # windows 0 and 1, one charge each
    assert run.store.window_records(0) == []  # the records are dropped once released
    run.close()


def test_later_records_are_centred_on_the_served_centre(tmp_path):
    run = Run(tmp_path, coordinator=CentreCoordinator(), online=CENTRED)
    run.streamer.centre_noise = Exact()  # type: ignore[assignment]
    run.feed(SLOTS)
    run.to(1)
    centre = run.store.centre()
    assert centre is not None
    np.testing.assert_allclose(centre, centre_from_release(ball(0, SLOTS).sum(axis=0), SLOTS))
    run.feed(SLOTS, start=100)
    rows = run.store._db.execute("SELECT id, x FROM records WHERE win=1 AND queried=1 "
                                 "ORDER BY seq").fetchall()
    assert rows, "p = 0.5 over 20 slots"
    centred = CENTRED.rows(ball(100, SLOTS), centre)
    for rid, x in rows:  # the queried records are kept as used: centred
        i = int(rid[1:]) - 100
        np.testing.assert_allclose(np.frombuffer(x, dtype="<f8"), centred[i])
    assert not np.allclose(centred, ball(100, SLOTS))
    run.close()


def test_a_restart_in_the_centring_window_respends_nothing(tmp_path):
    first = Run(tmp_path, coordinator=CentreCoordinator(down=True), online=CENTRED)
    first.feed(5)
    with contextlib.suppress(CoordinatorUnavailable):
        first.to(1)  # the release is stored, then its POST fails
    [(key, stored)] = first.store.stored_releases()
    first.close()
    again = Run(tmp_path, coordinator=CentreCoordinator(), online=CENTRED)  # resume re-sends
    again.feed(5)  # the same records: skipped
    assert again.store.counts()["records"] == 5 and again.store.counts()["queried"] == 0
    [post] = again.coordinator.posts
    assert post == json.loads(stored) and post["idempotency_key"] == key  # the same bytes
    assert len(again.ledger.entries()) == 2  # window 0 once, window 1
    assert again.store.centre() is not None
    again.close()


def test_a_restart_in_the_middle_of_the_centring_window_sums_every_slot_once(tmp_path):
    first = Run(tmp_path, coordinator=CentreCoordinator(), online=CENTRED)
    first.feed(4)
    first.close()
    again = Run(tmp_path, coordinator=CentreCoordinator(), online=CENTRED)
    again.streamer.centre_noise = exact = Exact()  # type: ignore[assignment]
    again.feed(8)  # r0..r3 consumed before the kill: skipped
    again.to(1)
    [total] = exact.calls
    np.testing.assert_allclose(total, ball(0, 8).sum(axis=0))
    assert len(again.ledger.entries()) == 2 and len(again.coordinator.posts) == 1
    again.close()


def test_a_refused_late_centring_release_is_not_resent(tmp_path):
    coordinator = CentreCoordinator(fixed=True)
    run = Run(tmp_path, coordinator=coordinator, online=CENTRED)
    run.feed(5)
    run.to(1)
    run.to(2)
    assert coordinator.refused == 1
    assert [p["window"] for p in coordinator.posts] == [1]  # window 0 refused, never re-sent
    assert run.store.counts()["refused"] == 1 and run.store.stored_releases() == []
    assert run.store.centre() is None  # no centre served: records stay uncentred
    assert len(run.ledger.entries()) == 3  # the refused window stays charged here
    run.close()


def test_a_late_centring_release_refused_after_a_rewrap_is_not_resent(tmp_path):
    coordinator = CentreCoordinator(fixed=True, refuse_config=1)
    run = Run(tmp_path, coordinator=coordinator, online=CENTRED,
              refetch=lambda: (study(2, CENTRED), "e" * 64))
    run.feed(3)
    run.to(1)  # stale config: re-wrapped under version 2, then refused as the centre is fixed
    assert coordinator.refused == 1 and coordinator.posts == []
    assert run.store.counts()["refused"] == 1 and run.store.stored_releases() == []
    run.close()


def test_windows_before_the_centring_window_are_scored_only(tmp_path):
    run = Run(tmp_path, coordinator=CentreCoordinator(),
              online=ONLINE.model_copy(update={"centre_window": 2}))
    run.feed(3)
    assert run.ledger.entries() == [] and run.store.window()[0] == -1
    assert run.store.counts()["beyond_slots"] == 3 and run.store.counts()["queried"] == 0
    run.to(2)  # the schedule starts: window 2 charged and opened, nothing released
    assert len(run.ledger.entries()) == 1 and run.coordinator.posts == []
    run.feed(2, start=3)
    assert [s for (s,) in run.store._db.execute("SELECT slot FROM records WHERE win=2")] == [0, 1]
    run.close()


class SteppedCoordinator(FakeCoordinator):
    """Serves a model that has already taken a step (the centre is fixed), no centre."""

    def request(self, method: str, path: str, **kw: object) -> httpx.Response:
        response = super().request(method, path, **kw)
        if method == "GET":
            response = httpx.Response(200, json={**response.json(), "version": 1})
        return response


def test_a_centring_window_whose_centre_is_fixed_is_skipped_uncharged(tmp_path):
    coordinator = SteppedCoordinator()
    run = Run(tmp_path, coordinator=coordinator, online=CENTRED)  # opens window 0: skipped
    assert run.ledger.entries() == [] and run.store.skipped(0)
    run.feed(5)
    assert run.store.counts()["queried"] == 0
    assert [s for (s,) in run.store._db.execute("SELECT slot FROM records WHERE win=0")] \
        == [None] * 5  # scored only: no slot, nothing kept for a release
    run.to(1)
    assert coordinator.posts == [] and len(run.ledger.entries()) == 1  # window 1 only
    run.to(2)
    assert [p["window"] for p in coordinator.posts] == [1]
    assert run.store.stored_releases() == [] and run.store.counts()["refused"] == 0
    run.close()
