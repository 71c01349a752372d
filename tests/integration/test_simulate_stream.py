"""`fedod-simulate --stream` end to end with small settings: a real coordinator process and
two hospital `stream` processes; what it prints must match the schedule and the ledgers."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from common.online import OnlineParams


@pytest.mark.parametrize("centre", [True, False], ids=["centred", "no-centre"])
def test_simulate_stream_prints_one_row_per_window_and_the_charges(tmp_path, centre):
    """Centred (the default): window 0 is the centring window, so round 1 queries nothing
    and takes no step, round 2 takes one; ``--no-centre``: one step per round."""
    done = subprocess.run(
        [sys.executable, "-m", "simulation.main", "--stream", "--hospitals", "2",
         "--stream-records", "300", "--chunks", "2", "--query-p", "0.2", "--epsilon", "1",
         "--workdir", str(tmp_path), *([] if centre else ["--no-centre"])],
        capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "digits 0 vs 9, 300 records across hospitals" in out
    assert "75 slots per hospital and window" in out
    rows = re.findall(r"^\| (\d+) \| (\d+) \| (\d+) \| ([\d.]+) % \|$", out, re.M)
    assert [int(r[0]) for r in rows] == [150, 300]
    labels = [int(r[1]) for r in rows]
    steps = [int(r[2]) for r in rows]
    assert labels[1] <= 300 * 0.2 * 3  # at most p per record (+ slack)
    if centre:
        assert "centring window 0 (round 1): no record queried" in out
        assert labels[0] == 0 < labels[1]  # the centring window queries nothing
        assert steps == [0, 1]  # its releases make the centre, not a step
    else:
        assert "no centring (--no-centre)" in out
        assert 0 < labels[0] <= labels[1]
        assert steps == [1, 2]  # the two hospitals' releases of a window make one step
    for name in ("online, every record labelled, no noise", "batch LinearSVC, no noise",
                 "majority class"):
        assert re.search(rf"  {re.escape(name)}: [\d.]+ %", out), name
    cost = OnlineParams(dim=65, p=0.2, window_slots=75, window_seconds=60).epoch_cost()
    spent = str((cost.epsilon * 2).normalize())  # two windows released per hospital
    assert f"epsilon spent: hospital-1 {spent}, hospital-2 {spent}" in out
    logs = [(tmp_path / f"hospital-{i}" / "participant.log").read_text() for i in (1, 2)]
    assert all("window 2 open" in log for log in logs), logs
