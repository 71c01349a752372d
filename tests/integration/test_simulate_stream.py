"""`fedod-simulate --stream` end to end with small settings: a real coordinator process and
two hospital `stream` processes; what it prints must match the schedule and the ledgers."""

from __future__ import annotations

import re
import subprocess
import sys

from common.online import OnlineParams


def test_simulate_stream_prints_one_row_per_window_and_the_charges(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "participant.simulate", "--stream", "--hospitals", "2",
         "--stream-records", "300", "--chunks", "2", "--query-p", "0.2", "--epsilon", "1",
         "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "digits 0 vs 9, 300 records across hospitals" in out
    assert "75 slots per hospital and window" in out
    rows = re.findall(r"^\| (\d+) \| (\d+) \| (\d+) \| ([\d.]+) % \|$", out, re.M)
    assert [int(r[0]) for r in rows] == [150, 300]
    labels = [int(r[1]) for r in rows]
    steps = [int(r[2]) for r in rows]
    assert 0 < labels[0] <= labels[1] <= 300 * 0.2 * 3  # at most p per record (+ slack)
    assert steps == [1, 2]  # the two hospitals' releases of a window make one step
    for name in ("online, every record labelled, no noise", "batch LinearSVC, no noise",
                 "majority class"):
        assert re.search(rf"  {re.escape(name)}: [\d.]+ %", out), name
    cost = OnlineParams(dim=65, p=0.2, window_slots=75, window_seconds=60).epoch_cost()
    spent = str((cost.epsilon * 2).normalize())  # two windows released per hospital
    assert f"epsilon spent: hospital-1 {spent}, hospital-2 {spent}" in out
    logs = [(tmp_path / f"hospital-{i}" / "participant.log").read_text() for i in (1, 2)]
    assert all("window 2 open" in log for log in logs), logs
