"""The reviewer's interactive label prompt of `fedod-participant stream --watch` on a terminal,
driven through a pseudo-terminal: each prompt is answered when its text appears."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess

from stream_cli_kit import EXE, score_rows, setup

PROMPT = re.compile(rb"label record (r\d+) \(margin [-+]\d\.\d{3}\): 1 = outlier, 0 = inlier, "
                    rb"empty = later: ")
ANSWERS = [b"1", b"maybe", b"0", b"", b"outlier"]  # "maybe" is asked again; empty = later
"""Python writes input()'s prompt to stderr without readline: the terminal is all three."""


def test_prompt_on_a_terminal_uses_the_reviewers_answers(participant_coordinator, tmp_path):
    state, records, _ = setup(participant_coordinator, tmp_path, "st-tty", "hosp-st-tty", n=40)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.jsonl").write_text("".join(records.read_text().splitlines(keepends=True)[:40]))
    out = tmp_path / "scores.csv"
    master, slave = os.openpty()
    proc = subprocess.Popen([EXE, "--state", str(state), "--json", "stream", "st-tty", "--watch",
                             str(inbox), "--once", "--clock", "ticks", "--out", str(out)],
                            stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    seen, asked, answered, buf = 0, [], [], b""
    while True:
        ready, _, _ = select.select([master], [], [], 300)  # bounds a hang only
        assert ready, f"no output from the stream; last: {buf[-300:]!r}"
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        buf += chunk
        prompts = PROMPT.findall(buf)
        while seen < len(prompts):  # answer each new prompt once, when its text is there
            answer = ANSWERS[seen % len(ANSWERS)]
            os.write(master, answer + b"\n")
            asked.append(prompts[seen].decode())
            answered.append(answer)
            seen += 1
    proc.wait(timeout=300)
    os.close(master)
    text = buf.decode(errors="replace")
    assert proc.returncode == 0, text[-2000:]
    summary = json.loads(text.strip().splitlines()[-1])  # the prompt is on stderr, too
    queried = [r["id"] for r in score_rows(out) if r["queried"] == "1"]
    assert queried, "p = 0.5 over 40 records"
    # each queried record was prompted; "maybe" re-prompts the same record
    distinct = list(dict.fromkeys(asked))
    assert distinct == queried
    valid = [a for a in answered if a in (b"1", b"0", b"outlier")]
    assert summary["queried"] == len(queried) and summary["labelled"] == len(valid)
    assert summary["awaiting_labels"] == len(queried) - len(valid)  # "later" ones wait
