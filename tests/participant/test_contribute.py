"""Contribute flow against a fake coordinator (httpx.MockTransport): retries, recovery, caps."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from release_kit import FEATS, FakeCoordinator, agent_for

from common.budget import PrivacyBudget
from common.errors import BudgetExceeded, CoordinatorUnavailable, SchemaMismatch
from common.histograms.merge import merge_sparse
from common.study.config import GridParams, PrivacyParams, new_study_config
from common.study.signing import key_fingerprint
from common.wire.encoding import EncodedCounts, decode_counts
from participant.agent import Agent, DataOptions
from participant.cli.main import exit_code
from participant.client import CoordinatorRefused
from participant.data.counts import ExactCounts, exact_histograms
from participant.data.reader import DataSource, DataSpec
from participant.release import contribute as rel


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "d.csv"
    X = np.random.default_rng(0).uniform(0, 1, size=(300, 3))
    np.savetxt(path, X, delimiter=",", header="a,b,c", comments="")
    return path


def test_unavailable_coordinator_keeps_the_release_and_the_next_run_resends_it(tmp_path, data):
    fake = FakeCoordinator()
    agent = agent_for(fake, tmp_path)
    fake.status = [503] * 3
    with pytest.raises(CoordinatorUnavailable) as info:
        agent.contribute("s1", data, DataOptions())
    assert exit_code(info.value) == 6
    with agent.ledger() as ledger:
        assert [e.status for e in ledger.entries()] == ["stored"]
    outcome = agent.contribute("s1", data, DataOptions())
    assert outcome.sent[0].resent and len(fake.posts) == 4 and len(set(fake.posts)) == 1
    with agent.ledger() as ledger:
        assert [e.status for e in ledger.entries()] == ["acknowledged"]
        assert ledger.spent() == PrivacyBudget("1")
    fresh = agent.contribute("s1", data, DataOptions())  # nothing pending: a new release
    assert not fresh.sent[0].resent and fake.posts[-1] != fake.posts[0]
    assert agent.spent() == PrivacyBudget("2")


def test_coordinator_budget_refusal_is_final_and_still_counted_locally(tmp_path, data):
    fake = FakeCoordinator()
    agent = agent_for(fake, tmp_path)
    fake.status = [409]
    with pytest.raises(CoordinatorRefused) as info:
        agent.contribute("s1", data, DataOptions())
    assert exit_code(info.value) == 5 and len(fake.posts) == 1
    with agent.ledger() as ledger:
        assert [e.status for e in ledger.entries()] == ["rejected"]
        assert ledger.spent() == PrivacyBudget("1")  # the bytes left the machine


def test_local_cap_refuses_before_reading_data_or_drawing_noise(tmp_path):
    fake = FakeCoordinator()
    agent = agent_for(fake, tmp_path, cap="0.5")
    with pytest.raises(BudgetExceeded) as info:
        agent.contribute("s1", tmp_path / "does-not-exist.csv", DataOptions())
    assert exit_code(info.value) == 5 and fake.posts == []
    assert list((tmp_path / "state" / "outbox").iterdir()) == []


def test_invalid_data_draws_no_noise(tmp_path):
    fake = FakeCoordinator()
    agent = agent_for(fake, tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n0.1,0.2\n")
    with pytest.raises(SchemaMismatch) as info:
        agent.contribute("s1", bad, DataOptions())
    assert exit_code(info.value) == 3 and fake.posts == []
    with agent.ledger() as ledger:
        assert ledger.entries() == []


def test_sparse_grid_release_sends_thresholded_cells_and_delta(tmp_path, data):
    fake = FakeCoordinator(GridParams(bins=4, k=5, cell_limit=16), delta="1e-6")
    agent = agent_for(fake, tmp_path, delta_cap="1e-5")
    agent.contribute("s1", data, DataOptions(chunk_rows=50))
    body = json.loads(fake.posts[0])
    assert body["delta"] == "0.000001"
    grid = EncodedCounts.model_validate(body["grid"])
    idx, values = decode_counts(grid, expected_cells=64)
    assert grid.layout == "sparse" and idx is not None and len(idx) <= 64
    assert agent.spent() == PrivacyBudget("1.5", "1e-6")


def test_recover_charges_unstored_and_resends_stored(tmp_path):
    fake = FakeCoordinator()
    agent = agent_for(fake, tmp_path)
    with agent.ledger() as ledger:
        for key in ("never-stored-0000", "was-stored-000000"):
            ledger.reserve(idempotency_key=key, study="s1", config_version=1,
                           config_digest="0" * 64, cost=PrivacyBudget("1"),
                           cap=PrivacyBudget("10"))
        agent.state.outbox_path("was-stored-000000").write_bytes(b"{}")
        partial = agent.state.outbox / ".never-stored-0000.json.tmp"
        partial.write_bytes(b"noisy body")
        rel.recover(agent.state, ledger)
        assert {e.idempotency_key: e.status for e in ledger.entries()} == {
            "never-stored-0000": "abandoned", "was-stored-000000": "stored"}
        assert ledger.spent() == PrivacyBudget("2")  # the data may have been read: no refund
        assert not partial.exists()


@pytest.mark.parametrize("dense", [True, False])
def test_chunked_histograms_equal_whole_file_histograms(tmp_path, data, dense):
    config = FakeCoordinator(GridParams(bins=3, k=5)).config
    spec = DataSpec.from_config(config)
    whole = np.loadtxt(data, delimiter=",", skiprows=1)
    exact = exact_histograms(DataSource(data, spec, chunk_rows=40), config.lsh_family(),
                             config.grid_spec(), dense_grid=dense)
    np.testing.assert_array_equal(exact.lsh, config.lsh_family().histogram(whole))
    expected = config.grid_spec().dense_counts(whole)
    if dense:
        np.testing.assert_array_equal(exact.grid_dense, expected)
    else:
        np.testing.assert_array_equal(exact.grid_cells[:, 0], np.flatnonzero(expected))
        np.testing.assert_array_equal(exact.grid_counts, expected[expected > 0])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(0, 50), max_size=30), max_size=6))
def test_sparse_merge_is_a_sum(chunks):
    cells = counts = np.empty(0, dtype=np.int64)
    for chunk in chunks:
        new_cells, new_counts = np.unique(np.array(chunk, dtype=np.int64), return_counts=True)
        cells, counts = merge_sparse(cells, counts, new_cells, new_counts)
    flat = np.array([c for chunk in chunks for c in chunk], dtype=np.int64)
    u, c = np.unique(flat, return_counts=True)
    np.testing.assert_array_equal(cells, u)
    np.testing.assert_array_equal(counts, c)


def test_release_refused_before_noise_when_the_coordinator_ledger_cannot_pay(tmp_path, data):
    fake = FakeCoordinator()
    agent = agent_for(fake, tmp_path)
    fake.remaining = "0.5"  # the release costs 1
    with pytest.raises(BudgetExceeded, match="Nothing was drawn or sent, and nothing was spent"):
        agent.contribute("s1", data, DataOptions())
    assert fake.posts == []
    with agent.ledger() as ledger:
        assert ledger.entries() == []


def test_a_coordinator_409_is_explained_as_spent_locally(tmp_path, data):
    fake = FakeCoordinator()
    agent = agent_for(fake, tmp_path)
    fake.status = [409]
    with pytest.raises(CoordinatorRefused) as info:
        agent.contribute("s1", data, DataOptions())
    assert exit_code(info.value) == 5
    assert "counts the release as spent" in info.value.message
    assert "nothing was spent" not in info.value.message


def test_enrol_checks_the_credential_and_stores_nothing_when_refused(tmp_path):
    fake = FakeCoordinator()
    fake.me_status = 401
    agent = Agent(tmp_path / "state", transport=httpx.MockTransport(fake), sleep=lambda s: None)
    with pytest.raises(CoordinatorRefused, match="does not accept this credential") as info:
        agent.enrol("http://coord.test", "bad", key_fingerprint(fake.key), epsilon_cap="1")
    assert exit_code(info.value) == 7
    assert not (tmp_path / "state" / "participant.json").exists()


@pytest.mark.parametrize("url", ["coord.test:8000", "localhost", "ftp://coord.test", "http://"])
def test_enrol_refuses_a_coordinator_that_is_not_an_http_url(tmp_path, url):
    def never(request):  # pragma: no cover - must not be reached
        raise AssertionError("no request may be sent")

    agent = Agent(tmp_path / "state", transport=httpx.MockTransport(never))
    with pytest.raises(ValueError, match="is not a URL: give it with its scheme") as info:
        agent.enrol(url, "tok", "sha256:" + "0" * 64, epsilon_cap="1")
    assert exit_code(info.value) == 2


def test_status_exits_non_zero_when_the_coordinator_cannot_be_asked(tmp_path, capsys):
    from participant.cli.main import main

    fake = FakeCoordinator()
    agent_for(fake, tmp_path)  # enrolled with http://coord.test, which does not resolve here
    code = main(["--state", str(tmp_path / "state"), "--max-tries", "1", "status", "--json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert code == 6 and "coordinator_error" in doc and "unavailable" in err
    assert doc["cap"] == {"epsilon": "10", "delta": "0"}


@pytest.mark.parametrize("dense", [True, False])
def test_counts_are_clipped_to_the_public_max_records_before_the_noise(monkeypatch, dense):
    """A cell past ``aggregation.max_records`` is released as if it held exactly that many
    records, so an honest large participant stays inside the coordinator's poisoning bound."""
    from common.histograms import release
    from common.secagg.params import AggregationParams

    config = new_study_config(
        "s1", FEATS, n_tables=4,
        privacy=PrivacyParams(epsilon_lsh="1", epsilon_grid="1", delta_grid="0" if dense
                              else "1e-7"),
        grid=GridParams(bins=2, cell_limit=8 if dense else 1),
        aggregation=AggregationParams(max_records=5),
    )
    seen: list[np.ndarray] = []
    monkeypatch.setattr(release, "release_lsh_counts",
                        lambda counts, *a, **k: seen.append(np.asarray(counts)))
    monkeypatch.setattr(release, "release_grid_counts",
                        lambda counts, *a, **k: seen.append(np.asarray(
                            counts if dense else counts[1])))
    counts = np.array([0, 3, 5, 6, 1000])
    exact = ExactCounts(lsh=counts, grid_dense=counts if dense else None,
                        grid_cells=None if dense else np.arange(5),
                        grid_counts=None if dense else counts)
    rel.noisy_releases(config, exact)
    for clipped in seen:
        np.testing.assert_array_equal(clipped, [0, 3, 5, 5, 5])
    assert len(seen) == 2
