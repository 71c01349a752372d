"""The study's cohorts page in real headless Chromium: rounds while running, then the
released cohorts (sizes, centres) against the coordinator's API."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from dashboard_kit import release_round

from common.study.config import StudyConfig

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _cells(browser, selector):
    from selenium.webdriver.common.by import By

    return [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in browser.find_elements(By.CSS_SELECTOR, selector)]


def test_cohorts_page_shows_rounds_then_the_released_cohorts(
        browser, artifacts, coordinator_server, fresh_postgres_url, coord_kit):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    server = coordinator_server(fresh_postgres_url, workers=1)
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    rng = np.random.default_rng(2)
    data = {"st-mary": np.clip(rng.normal(0.2, 0.01, (120, 3)), 0, 1),
            "charite": np.clip(rng.normal(0.8, 0.01, (80, 3)), 0, 1)}
    with httpx.Client(base_url=server.url, headers=admin, timeout=30) as c:
        spec = {**coord_kit.study_spec("cardio"),
                "cohorts": {"k": 2, "over": 2, "rounds": 2, "epsilon": "2"}}
        config = StudyConfig.model_validate_json(
            c.post("/v1/studies", json=spec).json()["config"]["payload"])
        tokens = {}
        for name in data:
            tokens[name] = c.post("/v1/participants",
                                  json={"name": name, "epsilon_cap": "5"}).json()["token"]
            c.post("/v1/studies/cardio/members", json={"participant": name})
        c.post("/v1/studies/cardio/cohorts")
        release_round(c, config, tokens["st-mary"], 1, data["st-mary"])

        browser.get(server.url + "/admin/login")
        browser.find_element(By.ID, "token").send_keys(server.admin_token)
        browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        WebDriverWait(browser, 20).until(ec.presence_of_element_located((By.ID, "eps-max")))
        browser.get(server.url + "/admin/studies/cardio")
        browser.find_element(By.ID, "cohorts-link").click()
        WebDriverWait(browser, 20).until(ec.presence_of_element_located((By.ID, "cohort-status")))
        assert browser.find_element(By.ID, "cohort-status").text == "round 1 open"
        assert _cells(browser, "#cohort-rounds tbody tr") == [
            ["1", "open", "2", "1", "charite", ""]]
        assert "No cohort model released yet." in browser.page_source

        release_round(c, config, tokens["charite"], 1, data["charite"])
        for name in data:
            release_round(c, config, tokens[name], 2, data[name])
        model = c.get("/v1/studies/cardio/cohorts").json()["model"]

    browser.refresh()
    WebDriverWait(browser, 20).until(ec.presence_of_element_located((By.ID, "cohorts")))
    browser.save_screenshot(str(artifacts / "dashboard-cohorts.png"))
    assert browser.find_element(By.ID, "cohort-status").text == "done"
    rows = _cells(browser, "#cohort-rounds tbody tr")
    assert [r[:4] for r in rows] == [["1", "done", "2", "2"], ["2", "done", "2", "2"]]
    cohorts = _cells(browser, "#cohorts tbody tr")
    # sizes, largest first, as the API released them (exact pages: they count all 200
    # records). Not 120 and 80: the start centres come from the study's fresh random seed,
    # and k-means from some starts puts both hospitals in one cohort, which is a fit, not
    # a page, outcome.
    sizes = sorted(model["masses"], reverse=True)
    assert [r[1] for r in cohorts] == [f"{m:.0f}" for m in sizes] and sum(sizes) == 200
    for row in cohorts:
        i = int(row[0])
        centre = ", ".join(f"x{j} {v:.4g}" for j, v in enumerate(model["centroids"][i]))
        assert row[2].split("\n")[0] == centre
        assert row[3] == "nearest centre"
    width = browser.execute_script("return document.documentElement.scrollWidth")
    assert width <= browser.execute_script("return window.innerWidth") + 1
