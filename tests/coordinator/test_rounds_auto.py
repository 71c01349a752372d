"""Secure rounds the signed config opens (``open_rounds: when_ready``) and the admin's
``fedod-coordinator rounds`` commands."""

from __future__ import annotations

import json

import numpy as np
from coordinator_kit import ADMIN
from secagg_honest import honest_vector
from secagg_http import Env, Hospital
from sqlalchemy.orm import Session

from coordinator.cli.main import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, main
from coordinator.cli.rounds import describe
from coordinator.services.secagg import auto, rounds
from coordinator.services.secagg.views import round_public
from coordinator.services.studies import get_study

NAMES = ["h0", "h1", "h2", "h3"]


def _study(client, make_participant, coord_kit, n_hospitals):
    """A secure study of n = 4 (D = 1, T = 1) whose rounds open when_ready."""
    people = [make_participant(f"h{i}") for i in range(n_hospitals)]
    spec = coord_kit.study_spec("auto", n_tables=5, epsilon_lsh="0.5")
    spec["aggregation"] = {"mode": "secure", "cohort_size": 4, "max_dropouts": 1,
                           "max_colluders": 1, "open_rounds": "when_ready"}
    r = client.post("/v1/studies", json=spec, headers=ADMIN)
    assert r.status_code == 201, r.text
    assert '"open_rounds":"when_ready"' in r.json()["config"]["payload"]  # signed
    for p in people:
        client.post("/v1/studies/auto/members", json={"participant": p.name}, headers=ADMIN)
    env = Env(client, r.json()["config"])
    rng = np.random.default_rng(5)
    return env, [Hospital(client, p, "auto", honest_vector(env.config, rng)) for p in people]


def _current(client, hospital):
    return client.get("/v1/studies/auto/rounds/current", headers=hospital.e.headers)


def test_round_one_opens_itself_once_every_certified_member_is_ready(
        client, app, make_participant, coord_kit):
    env, hs = _study(client, make_participant, coord_kit, 4)
    assert _current(client, hs[0]).status_code == 404  # no certificate: nothing opens
    assert env.certify(client, hs, ADMIN).status_code == 200
    st = hs[1].state()  # the first member to ask finds it open
    assert (st.round, st.attempt, st.status) == (1, 1, "keys")
    assert hs[0].state().round == 1 and hs[3].state().round == 1
    (opened,) = client.get("/v1/studies/auto/rounds", headers=ADMIN).json()
    assert opened["expected"] == NAMES
    with Session(app.state.engine) as session:
        study = get_study(session, "auto")
        assert auto.readiness(session, study) is None  # a round exists
        rnd = rounds.abort_round(session, study, 1)
        assert rnd.status == "abandoned" and "aborted by the administrator" in rnd.detail
        assert describe(round_public(session, rnd)).startswith(
            "round 1 attempt 1: abandoned; expected 4 (h0, h1, h2, h3)")
    st = hs[2].state()  # only round 1 opens itself: the next one is the admin's
    assert (st.round, st.status) == (1, "abandoned")
    r = client.post("/v1/studies/auto/rounds", headers=ADMIN)
    assert r.status_code == 201 and r.json()["round"] == 2


def test_a_missing_member_leaves_the_round_to_the_admin(client, app, make_participant,
                                                        coord_kit):
    env, hs = _study(client, make_participant, coord_kit, 3)
    assert env.certify(client, hs, ADMIN).status_code == 200  # 4 certified, 3 registered
    r = _current(client, hs[0])
    assert r.status_code == 404 and "no round yet" in r.json()["detail"]
    with Session(app.state.engine) as session:
        assert auto.readiness(session, get_study(session, "auto")) == (3, 4)
    r = client.post("/v1/studies/auto/rounds", headers=ADMIN)  # n - D = 3 may run
    assert r.status_code == 201 and r.json()["expected"] == NAMES[:3]


def test_rounds_cli_refuses_what_it_cannot_do(env, capsys, coord_kit):
    spec = env / "s.json"
    spec.write_text(json.dumps(coord_kit.study_spec("plain")))
    assert main(["study", "create", str(spec)]) == EXIT_OK
    capsys.readouterr()
    assert main(["rounds", "list", "plain"]) == EXIT_REFUSED
    assert "independent noise" in capsys.readouterr().err
    secure = {**coord_kit.study_spec("sec"), "aggregation": {"mode": "secure",
                                                             "cohort_size": 3}}
    spec.write_text(json.dumps(secure))
    assert main(["study", "create", str(spec)]) == EXIT_OK
    capsys.readouterr()
    assert main(["rounds", "show", "sec"]) == EXIT_OK
    assert "no round yet: open one with 'fedod-coordinator rounds open sec'" in \
        capsys.readouterr().err
    assert main(["rounds", "open", "sec"]) == EXIT_REFUSED
    assert "no membership certificate" in capsys.readouterr().err
    assert main(["rounds", "advance", "sec", "x"]) == EXIT_USAGE
    assert main(["rounds", "membership", "sec"]) == EXIT_USAGE
    assert main(["rounds", "abort", "ghost"]) == EXIT_REFUSED
