"""The dashboard's table of secure aggregation rounds, in real headless Chromium, against a
real coordinator process whose rounds were driven over HTTP: a restarted attempt, the attempt
that revealed the sum, and an open round."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from dashboard_kit import login
from secagg_honest import honest_vector
from secagg_http import Env, Hospital, Member

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FIELDS = ("study_id", "round", "attempt", "mode", "status", "cohort", "masked", "survivors",
          "recovered_by", "detail")


def drive_rounds(server, coord_kit) -> list[dict]:
    """n = 4, D = 1, T = 1. Round 1: h0 leaves after its keys, the admin restarts without it,
    attempt 2 reveals the sum of three. Round 2 is left open in its key phase."""
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    with httpx.Client(base_url=server.url, timeout=30) as c:
        spec = coord_kit.study_spec("sec", n_tables=5, epsilon_lsh="0.5")
        spec["aggregation"] = {"mode": "secure", "cohort_size": 4, "max_dropouts": 1,
                               "max_colluders": 1}
        env = Env(c, c.post("/v1/studies", json=spec, headers=admin).json()["config"])
        rng = np.random.default_rng(11)
        hospitals = []
        for i in range(4):
            name = f"h{i}"
            token = c.post("/v1/participants", json={"name": name, "epsilon_cap": "5"},
                           headers=admin).json()["token"]
            c.post("/v1/studies/sec/members", json={"participant": name}, headers=admin)
            hospitals.append(Hospital(c, Member(name, token), "sec",
                                      honest_vector(env.config, rng)))
        assert env.certify(c, hospitals, admin).status_code == 200
        assert c.post("/v1/studies/sec/rounds", headers=admin).status_code == 201
        for h in hospitals:
            h.send("keys", h.state(), h.advert(h.state()))
        for h in hospitals[1:]:
            h.send("masked", h.state(), h.masked(h.state(), env))
        assert c.post("/v1/studies/sec/rounds/1/advance", headers=admin).json()["attempt"] == 2
        for h in hospitals[1:]:
            h.send("keys", h.state(), h.advert(h.state()))
        for h in hospitals[1:]:
            h.send("masked", h.state(), h.masked(h.state(), env))
        for h in hospitals[1:]:
            h.send("unmask", h.state(), h.unmask(h.state(), env))
        assert c.post("/v1/studies/sec/rounds", headers=admin).status_code == 201
        rounds = c.get("/v1/studies/sec/rounds", headers=admin).json()
    assert [(r["attempt"], r["status"]) for r in rounds] == [(1, "restarted"), (2, "done"),
                                                             (1, "keys")]
    return rounds


def test_rounds_table_shows_every_attempt_as_the_api_reports_it(browser, artifacts,
                                                                coordinator_server, tmp_path,
                                                                coord_kit):
    from selenium.webdriver.common.by import By

    server = coordinator_server(f"sqlite:///{tmp_path / 'c.db'}", workers=1)
    rounds = drive_rounds(server, coord_kit)
    login(browser, server)

    rows = browser.find_elements(By.CSS_SELECTOR, "#rounds tbody tr")
    shown = [[td.text for td in row.find_elements(By.TAG_NAME, "td")] for row in rows]
    expected = [[str(r[f] if r[f] is not None else "") for f in FIELDS] for r in rounds]
    assert shown == expected
    assert [row.get_attribute("data-round") for row in rows] == [
        f"sec/{r['round']}/{r['attempt']}" for r in rounds]
    assert [r["cohort"] for r in rounds[:2]] == [4, 3]
    assert rounds[1]["survivors"] == 3 and rounds[0]["masked"] == 3
    browser.save_screenshot(str(artifacts / "dashboard-rounds.png"))

    browser.set_window_size(420, 900)
    browser.get(server.url + "/admin")
    width = browser.execute_script("return window.innerWidth")
    scroll = browser.execute_script("return document.documentElement.scrollWidth")
    assert scroll <= width, (scroll, width)  # the wide table scrolls inside its own box
    table = browser.find_element(By.ID, "rounds")
    assert browser.execute_script(
        "return arguments[0].closest('.scroll').scrollWidth >= arguments[0].scrollWidth", table)
    browser.save_screenshot(str(artifacts / "dashboard-rounds-phone.png"))
