"""Group commit: several releases in one batch, each answered as if it had been alone.

The batch is formed deterministically, without timers: a first request holds the writer's
thread (its batch waits on an event) until the test has seen the other requests queue up
behind it (``GroupWriter.pending``); they then run as one batch. On SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from coordinator_kit import ADMIN
from sqlalchemy import func, select

from coordinator.db.tables import Aggregate, Contribution, LedgerEntry, Participant
from coordinator.services import group_commit

URL = "/v1/studies/s1/contributions"


@pytest.fixture
def batches(monkeypatch):
    """Sizes of the batches run; the first batch waits until ``release.set()``."""
    release, sizes = threading.Event(), []
    real = group_commit.run_batch

    def run_batch(session, batch):
        sizes.append(len(batch))
        if len(sizes) == 1:
            assert release.wait(timeout=120), "the test never let the first batch go"
        return real(session, batch)

    monkeypatch.setattr(group_commit, "run_batch", run_batch)
    return release, sizes


def post_as_one_batch(app, batches, first, rest):
    """POST ``first``, hold its batch, POST every request of ``rest`` behind it; once all of
    them wait for the writer, let the first batch go: ``rest`` runs as one batch."""
    release, sizes = batches

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            head = asyncio.ensure_future(c.post(URL, json=first[0], headers=first[1]))
            while not sizes:  # the first batch has started and holds the writer's thread
                assert not head.done(), head.result().text
                await asyncio.sleep(0)
            tail = [asyncio.ensure_future(c.post(URL, json=b, headers=h)) for b, h in rest]
            while app.state.group_writer.pending < len(rest):
                if any(t.done() for t in tail):  # answered without the writer: fail below
                    break
                await asyncio.sleep(0)
            release.set()
            return await head, await asyncio.gather(*tail)

    return asyncio.run(run())


def budget(client):
    rows = client.get("/v1/admin/budget", headers=ADMIN).json()
    return {b["participant"]: (b["epsilon_spent"], len(b["entries"])) for b in rows}


def test_one_batch_stores_each_release_and_refuses_the_one_over_budget(
    client, app, make_participant, make_study, coord_kit, rng, batches
):
    _, sizes = batches
    lead, h1, h2, h3 = (make_participant(n, epsilon_cap="1") for n in ("lead", "h1", "h2", "h3"))
    signed = make_study("s1", members=[lead, h1, h2, h3])
    first = (coord_kit.release(signed, rng)[0], lead.headers)
    # h1's cap holds two releases: the third passes the read (nothing spent yet) and is
    # refused by the batch's conditional charge; h2 and h3 go in the same batch
    rest = [(coord_kit.release(signed, rng)[0], p.headers) for p in (h1, h1, h2, h1, h3)]
    head, tail = post_as_one_batch(app, batches, first, rest)
    assert sizes == [1, 5]
    assert head.status_code == 201
    by_h1 = [hd == h1.headers for _, hd in rest]
    assert sorted(r.status_code for r, mine in zip(tail, by_h1, strict=True) if mine) == [
        201, 201, 409]
    [refused] = [r for r in tail if r.status_code == 409]
    assert "budget" in refused.json()["detail"]
    assert [r.status_code for r, mine in zip(tail, by_h1, strict=True) if not mine] == [201, 201]
    assert budget(client) == {"lead": ("0.5", 1), "h1": ("1", 2), "h2": ("0.5", 1),
                              "h3": ("0.5", 1)}
    versions = sorted(r.json()["model_version"] for r in [head, *tail] if r.status_code == 201)
    assert versions == [1, 2, 3, 4, 5]
    with app.state.sessionmaker() as session:
        aggregate = session.get(Aggregate, "s1")
        assert (aggregate.version, aggregate.contributors) == (5, 4)
        assert session.scalar(select(func.count()).select_from(Contribution)) == 5
        assert session.scalar(select(func.count()).select_from(LedgerEntry)) == 5
        h1_row = session.scalar(select(Participant).where(Participant.name == "h1"))
        assert h1_row.eps_spent <= h1_row.eps_cap
    refusals = client.get("/v1/admin/budget", headers=ADMIN).json()
    assert refusals  # the dashboard's data still loads after a refusal inside a batch


def test_a_key_twice_in_one_batch_is_stored_once(
    client, app, make_participant, make_study, coord_kit, rng, batches
):
    _, sizes = batches
    lead, h1, h2 = (make_participant(n, epsilon_cap="1") for n in ("lead", "h1", "h2"))
    signed = make_study("s1", members=[lead, h1, h2])
    first = (coord_kit.release(signed, rng)[0], lead.headers)
    key = "key-of-h1-twice-in-a-batch"
    same = coord_kit.release(signed, rng, key=key)[0]
    other = coord_kit.release(signed, rng, key=key)[0]  # the same key, other counts
    rest = [(same, h1.headers), (same, h1.headers), (other, h1.headers),
            (coord_kit.release(signed, rng)[0], h2.headers)]
    head, tail = post_as_one_batch(app, batches, first, rest)
    assert sizes[:2] == [1, 4]
    assert head.status_code == 201
    *h1_answers, h2_answer = tail
    [stored] = [i for i, r in enumerate(h1_answers) if r.status_code == 201]
    codes = [r.status_code for r in h1_answers]
    if stored in (0, 1):  # the same bytes again: a replay; other bytes under the key: 409
        assert codes[1 - stored] == 200 and codes[2] == 409
        assert h1_answers[1 - stored].json()["id"] == h1_answers[stored].json()["id"]
    else:  # the other bytes came first: both copies conflict with them
        assert codes == [409, 409, 201]
    conflicts = [r for r in h1_answers if r.status_code == 409]
    assert all("idempotency key already used" in r.json()["detail"] for r in conflicts)
    assert h2_answer.status_code == 201
    assert budget(client) == {"lead": ("0.5", 1), "h1": ("0.5", 1), "h2": ("0.5", 1)}
