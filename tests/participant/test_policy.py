"""Participant-side privacy policy (participant.release.policy): send slot, ceiling, approved
schema, row cap, no refund after the data is read, noise-only substitutes, always-clip, empty
files."""

from __future__ import annotations

import json
import os

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from release_kit import FEATS, FakeCoordinator, agent_for

from common.budget import PrivacyBudget
from common.errors import BudgetExceeded, SchemaMismatch
from common.study.config import FeatureSpec, GridParams, PrivacyParams, new_study_config
from common.study.signing import sign_config
from common.wire.encoding import EncodedCounts, decode_counts
from participant import state as state_mod
from participant.agent import Agent, DataOptions
from participant.cli.main import exit_code
from participant.data.reader import keep_first_rows
from participant.release import contribute as rel
from participant.release.policy import SchemaNotApproved, send_schedule


@pytest.mark.parametrize(
    ("anchor", "slot", "ready", "expected"),
    [
        (100.0, 30.0, 100.0, (130.0, 1)),   # ready at once: one slot
        (100.0, 30.0, 129.9, (130.0, 1)),   # ready just before the slot ends: same send time
        (100.0, 30.0, 130.0, (130.0, 1)),
        (100.0, 30.0, 130.1, (160.0, 2)),   # overran: next multiple (the residual channel)
        (100.0, 30.0, 250.0, (250.0, 5)),
        (5.0, 0.0, 7.5, (7.5, 0)),          # no padding
    ],
)
def test_send_time_depends_only_on_the_anchor_and_slot_while_the_data_fits(
    anchor, slot, ready, expected
):
    assert send_schedule(anchor, slot, ready) == expected


@pytest.mark.parametrize("slot", [-1.0, float("inf"), float("nan")])
def test_bad_send_slot_is_refused(slot):
    with pytest.raises(ValueError, match="send slot"):
        send_schedule(0.0, slot, 0.0)


class Clock:
    """Injected clock: the test decides how long reading the data "takes"."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def write_rows(path, n, seed=0, extra=""):
    X = np.random.default_rng(seed).uniform(0, 1, size=(n, 3))
    lines = ["a,b,c" + (",label" if extra else "")]
    lines += [",".join(f"{v:.6f}" for v in row) + extra for row in X]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("rows", "seconds_per_row", "slots"),
                         [(10, 0.001, 1), (3000, 0.001, 1), (3000, 0.025, 3)])
def test_post_goes_out_at_the_slot_whatever_the_reading_time(
    tmp_path, monkeypatch, rows, seconds_per_row, slots
):
    fake = FakeCoordinator()
    clock = Clock()
    seen: dict[str, float] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen[request.method + request.url.path.rsplit("/", 1)[-1]] = clock.t
        return fake(request)

    agent = Agent(tmp_path / "state", transport=httpx.MockTransport(handler),
                  sleep=clock.sleep, clock=clock)
    agent.enrol("http://coord.test", "tok", fake_fp(fake), epsilon_cap="10")
    slow = rel.exact_histograms

    def timed(source, *args, **kw):  # reading costs fake time proportional to the rows
        out = slow(source, *args, **kw)
        clock.t += seconds_per_row * source.report.rows
        return out

    monkeypatch.setattr(rel, "exact_histograms", timed)
    outcome = agent.contribute("s1", write_rows(tmp_path / "d.csv", rows), DataOptions(),
                               send_slot=30.0)
    assert outcome.send_slots == slots
    assert seen["POSTcontributions"] - seen["GETconfig"] == pytest.approx(30.0 * slots)


def fake_fp(fake):
    from common.study.signing import key_fingerprint

    return key_fingerprint(fake.key)


def test_per_release_ceiling_refuses_before_reading(tmp_path):
    fake = FakeCoordinator(GridParams(bins=3, k=5))  # 1.5 per release
    agent = Agent(tmp_path / "state", transport=httpx.MockTransport(fake), sleep=lambda s: None)
    agent.enrol("http://coord.test", "tok", fake_fp(fake), epsilon_cap="10",
                max_release_epsilon="1")
    with pytest.raises(BudgetExceeded, match="per-release ceiling 1") as info:
        agent.contribute("s1", tmp_path / "not-read.csv", DataOptions(), send_slot=0)
    assert exit_code(info.value) == 5 and fake.posts == []
    with agent.ledger() as ledger:
        assert ledger.entries() == []


def test_default_ceiling_is_two_or_the_cap(tmp_path):
    fake = FakeCoordinator()
    default = agent_for(fake, tmp_path / "a").state.load_enrolment().ceiling
    assert default == PrivacyBudget("2", "0.0001")  # delta: the config ceiling (delta_floor)
    small = agent_for(fake, tmp_path / "b", cap="0.5").state.load_enrolment()
    assert small.ceiling == PrivacyBudget("0.5", "0.0001")


def reissue(fake, features, version):
    fake.config = new_study_config("s1", features, privacy=PrivacyParams(epsilon_lsh="1"),
                                   n_tables=8, version=version)
    fake.signed = sign_config(fake.config, fake.key)


def test_a_config_releasing_other_columns_needs_the_operators_approval(tmp_path):
    fake = FakeCoordinator()
    agent = agent_for(fake, tmp_path)
    data = write_rows(tmp_path / "d.csv", 50, extra=",1")
    options = DataOptions(ignore=("label",))
    agent.contribute("s1", data, options, send_slot=0)  # first release approves a, b, c
    assert agent.state.load_approved("s1")["columns"] == ["a", "b", "c"]

    # the label the operator ignores becomes a feature: refused whatever the approval
    reissue(fake, [*FEATS, FeatureSpec(name="label", lo=0.0, hi=1.0)], 2)
    with pytest.raises(SchemaMismatch, match="label"):
        agent.contribute("s1", data, options, send_slot=0, approve_schema=True)
    # a column dropped from the release: refused until approved
    reissue(fake, FEATS[:2], 3)
    two = tmp_path / "two.csv"
    two.write_text("a,b\n0.1,0.2\n")
    with pytest.raises(SchemaNotApproved, match=r"removed: \['c'\]") as info:
        agent.contribute("s1", two, DataOptions(), send_slot=0)
    assert exit_code(info.value) == 4 and len(fake.posts) == 1
    assert agent.spent() == PrivacyBudget("1")
    agent.approve("s1")
    agent.contribute("s1", two, DataOptions(), send_slot=0)
    assert len(fake.posts) == 2 and agent.state.load_approved("s1")["columns"] == ["a", "b"]


def test_out_of_bounds_error_is_refused_for_a_release_before_reading(tmp_path):
    fake = FakeCoordinator()
    agent = agent_for(fake, tmp_path)
    with pytest.raises(ValueError, match="a release always clips"):
        agent.contribute("s1", tmp_path / "x.csv", DataOptions(on_out_of_bounds="error"))
    assert fake.posts == [] and agent.spent() == PrivacyBudget.zero()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=60), st.integers(1, 4), st.integers(0, 6))
def test_removing_one_person_changes_at_most_cap_kept_rows(keys, cap, person):
    """Neighbouring datasets (one person's rows added or removed) differ by <= cap kept rows,
    and the rows other people keep do not change."""
    kept = keep_first_rows({}, keys, cap)
    others = [k for k in keys if k != person]
    kept_without = keep_first_rows({}, others, cap)
    assert sum(kept) - sum(kept_without) <= cap
    assert [k for k, m in zip(keys, kept, strict=True) if m and k != person] == [
        k for k, m in zip(others, kept_without, strict=True) if m]


def test_rows_per_id_keeps_the_first_rows_of_each_key(tmp_path):
    fake = FakeCoordinator()
    agent = agent_for(fake, tmp_path)
    data = tmp_path / "d.csv"
    data.write_text("pid,a,b,c\n" + "".join(f"p{i % 3},0.{i},0.5,0.5\n" for i in range(9)))
    outcome = agent.contribute("s1", data, DataOptions(id_column="pid", rows_per_id=2,
                                                       chunk_rows=4), send_slot=0)
    assert outcome.dropped == 3
    with pytest.raises(ValueError, match="needs --id-column"):
        agent.contribute("s1", data, DataOptions(rows_per_id=2, ignore=("pid",)), send_slot=0)
    with pytest.raises(ValueError, match="above 16"):
        agent.contribute("s1", data, DataOptions(id_column="pid", rows_per_id=17), send_slot=0)
    assert len(fake.posts) == 1  # the refused release sent and charged nothing


def lsh_noise_std(config, rows_per_id):
    values = [rel.noisy_releases(config, rel.empty_counts(config), rows_per_id)[0].values
              for _ in range(20)]
    return float(np.std(np.concatenate(values)))


def test_row_cap_scales_the_noise_by_the_cap():
    """Discrete Laplace of scale b has std ~ b*sqrt(2): scale m*N/eps, so N=5 gives ~5x."""
    config = FakeCoordinator(GridParams(bins=3, k=5)).config
    ratio = lsh_noise_std(config, 5) / lsh_noise_std(config, None)
    assert 4.0 < ratio < 6.0, ratio
    grid = [rel.noisy_releases(config, rel.empty_counts(config), n)[1] for n in (1, 5)]
    assert all(g is not None and g.layout == "dense" for g in grid)
    assert grid[1].cost == grid[0].cost == PrivacyBudget("0.5")


def test_unusable_data_sends_a_noise_only_release_and_charges_it(tmp_path, monkeypatch):
    """What no single row can cause (here a column of dates: its type is the file's) is
    refused by the whole-file check before anything is sent or charged; if the file turns
    unusable after the check (the check skipped here), a noise-only substitute is still sent
    and charged; one bad row is dropped instead (tests/privacy/test_malformed_rows.py)."""
    from participant.release import precheck

    fake = FakeCoordinator(GridParams(bins=3, k=5))
    agent = agent_for(fake, tmp_path)
    bad = tmp_path / "bad.parquet"
    X = np.random.default_rng(0).uniform(0, 1, size=(200, 3))
    dates = pa.array(np.arange(200).astype("datetime64[s]"))
    pq.write_table(pa.table({"a": X[:, 0], "b": dates, "c": X[:, 2]}), bad)  # read, then fails
    with pytest.raises(SchemaMismatch, match="non-numeric type"):
        agent.contribute("s1", bad, DataOptions(), send_slot=0)
    assert fake.posts == [] and agent.spent() == PrivacyBudget.zero()
    monkeypatch.setattr(precheck, "check_before_release", lambda *a, **k: None)
    with pytest.raises(rel.ReleaseSubstituted, match="noise-only release was sent") as info:
        agent.contribute("s1", bad, DataOptions(), send_slot=0)
    assert exit_code(info.value) == 3 and len(fake.posts) == 1
    body = json.loads(fake.posts[0])
    assert body["epsilon"] == "1.5" and body["grid"]["layout"] == "dense"
    assert EncodedCounts.model_validate(body["lsh"]).n_cells == fake.config.lsh_cells
    with agent.ledger() as ledger:
        (entry,) = ledger.entries()
        assert entry.status == "acknowledged" and "noise-only substitute" in entry.detail
        assert ledger.spent() == PrivacyBudget("1.5")


def test_a_crash_while_drawing_noise_still_sends_and_charges(tmp_path, monkeypatch):
    fake = FakeCoordinator()
    agent = agent_for(fake, tmp_path)
    real = rel.noisy_releases

    def crash_on_data(config, exact, rows_per_id=None):
        if exact.lsh.any():  # depends on the data, like the cell-index crash
            raise OverflowError("cell index does not fit")
        return real(config, exact, rows_per_id)

    monkeypatch.setattr(rel, "noisy_releases", crash_on_data)
    with pytest.raises(rel.ReleaseSubstituted, match="OverflowError"):
        agent.contribute("s1", write_rows(tmp_path / "d.csv", 30), DataOptions(), send_slot=0)
    assert len(fake.posts) == 1 and agent.spent() == PrivacyBudget("1")


def test_a_release_that_cannot_even_be_substituted_stays_charged(tmp_path, monkeypatch):
    fake = FakeCoordinator()
    agent = agent_for(fake, tmp_path)

    def always(*args, **kw):
        raise MemoryError("config too large")

    monkeypatch.setattr(rel, "noisy_releases", always)
    with pytest.raises(MemoryError):
        agent.contribute("s1", write_rows(tmp_path / "d.csv", 30), DataOptions(), send_slot=0)
    assert fake.posts == [] and list(agent.state.outbox.iterdir()) == []
    with agent.ledger() as ledger:
        assert [e.status for e in ledger.entries()] == ["abandoned"]
        assert ledger.spent() == PrivacyBudget("1")


@pytest.mark.parametrize("grid", [None, GridParams(bins=3, k=5),
                                  GridParams(bins=4, k=5, cell_limit=16)])
def test_an_empty_file_releases_noise_only_counts(tmp_path, grid):
    fake = FakeCoordinator(grid, delta="1e-6" if grid and grid.cell_limit == 16 else "0")
    agent = agent_for(fake, tmp_path, delta_cap="1e-5")
    empty = tmp_path / "empty.csv"
    empty.write_text("a,b,c\n")
    outcome = agent.contribute("s1", empty, DataOptions(), send_slot=0)
    assert len(outcome.sent) == 1 and len(fake.posts) == 1
    body = json.loads(fake.posts[0])
    _, lsh = decode_counts(EncodedCounts.model_validate(body["lsh"]),
                           expected_cells=fake.config.lsh_cells)
    assert lsh.any()  # noise, not zeros


def test_shred_overwrites_before_unlinking(tmp_path):
    path = tmp_path / "body.json"
    path.write_bytes(b"noisy counts")
    witness = tmp_path / "link"
    os.link(path, witness)  # a second name sees the same blocks
    state_mod.shred(path)
    assert not path.exists() and witness.read_bytes() == bytes(12)


def test_a_failed_write_leaves_no_temporary_body(tmp_path, monkeypatch):
    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(state_mod.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        state_mod.write_private(tmp_path / "out.json", b"noisy")
    assert list(tmp_path.iterdir()) == []
