"""``fedod-coordinator cohorts start|show|close`` against a SQLite deployment."""

from __future__ import annotations

import json

from coordinator.cli.main import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, main


def test_start_show_close_and_refusals(env, capsys, coord_kit):
    spec = env / "study.json"
    spec.write_text(json.dumps({**coord_kit.study_spec("c1"),
                                "cohorts": {"k": 2, "rounds": 2, "epsilon": "1"}}))
    assert main(["study", "create", str(spec)]) == EXIT_OK
    assert main(["cohorts", "start", "c1"]) == EXIT_REFUSED
    assert "no active members" in capsys.readouterr().err
    for name in ("h1", "h2"):
        main(["participant", "add", name, "--epsilon-cap", "2"])
        main(["member", "add", "c1", name])
    capsys.readouterr()
    assert main(["cohorts", "start", "c1"]) == EXIT_OK
    text = capsys.readouterr().out  # a short summary, not the centroid JSON
    assert text.splitlines() == ["cohorts of c1 (kmeans, 2 rounds): running, round 1 open",
                                 "  round 1: open; sent 0 of 2, waiting for h1, h2"]
    assert main(["cohorts", "show", "c1", "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "running" and doc["history"][0]["expected"] == ["h1", "h2"]
    assert doc["round"] == 1
    assert main(["cohorts", "close", "c1", "1"]) == EXIT_REFUSED
    assert "no release yet" in capsys.readouterr().err
    assert main(["cohorts", "close", "c1"]) == EXIT_USAGE
    assert main(["cohorts", "show", "ghost"]) == EXIT_REFUSED
    assert "no study 'ghost'" in capsys.readouterr().err
